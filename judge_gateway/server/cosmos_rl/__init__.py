"""cosmos-rl reward service protocol: POST /api/reward/{ping,pin,enqueue,pull,latent_attr} over Gateway.score.

cosmos-rl's reward service (`reward_service/` in cosmos-rl) takes an enqueue body as it comes (a
worker decodes it later), gives a uuid, and answers that uuid's pull 400 "Not found scores" until
a worker has stored its scores, which for a request whose scoring failed is never. Here the same
routes and bodies, with every failure said: an enqueue body is validated before a uuid is given
(400 with the reason otherwise); a full queue answers 503 instead of dropping; every accepted
request ends in a result or an explicit failure.

    routes.py     the routes (an APIRouter), their form bodies, and each answer's status code
    service.py    CosmosRLService: enqueue, pull, start and stop, over the modules below
    entry.py      a request's typed store entry (pending, done, failed) and its JSON
    jobs.py       the requests scoring in this process, each to one stored final entry
    scoring.py    one request scored: latents decoded, samples scored, result envelopes
    rescore.py    cells that failed transiently scored again until the request's deadline
    consumer.py   the durable queue's consumer (store.queue)
    heartbeat.py  this process's heartbeat in the store, read by every replica's pull
    pull.py       what a pull finds, as typed outcomes
    payload.py    an enqueue body -> a validated Prepared request (refused before a uuid is given)
    tensors.py    the body's JSON line and tensor bytes: npy/torch sniffing, shape/dtype checks
    envelope.py   the result envelopes a pull answers with: legacy score lists, invalid-sample fills
"""

from .routes import router
from .service import CosmosRLService

__all__ = ["CosmosRLService", "router"]
