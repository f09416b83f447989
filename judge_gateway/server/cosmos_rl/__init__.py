"""cosmos-rl reward service protocol: POST /api/reward/{ping,pin,enqueue,pull,latent_attr} over Gateway.score.

Better than the original in every failure case: an enqueue body is validated before a uuid is
given (400 with the reason otherwise); a full queue answers 503 instead of dropping; every
accepted request ends in a result or an explicit failure.

    routes.py    the four routes (an APIRouter) and their form bodies
    service.py   CosmosRLService: accepted work, its store entries, the heartbeat, the durable queue
    payload.py   an enqueue body -> a validated Prepared request (refused before a uuid is given)
    tensors.py   the body's JSON line and tensor bytes: npy/torch sniffing, shape/dtype checks
    envelope.py  the result envelopes a pull answers with: legacy score lists, invalid-sample fills
"""

from .routes import router
from .service import CosmosRLService

__all__ = ["CosmosRLService", "router"]
