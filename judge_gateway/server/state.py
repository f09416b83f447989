"""What the app factory keeps on `app.state` for every router, and the FastAPI dependencies routes
read it by: routes are plain functions on routers, never closures over the app's objects. (Each
protocol's own service is read the same way, by a dependency beside its routes.) The dependencies
are `async def`: FastAPI runs a plain `def` one on its thread pool, a hop per request on the
pool that parses request bodies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..gateway import Gateway
from .admission import Admission


async def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


async def admission_of(request: Request) -> Admission:
    return request.app.state.admission


GatewayDep = Annotated[Gateway, Depends(gateway_of)]
AdmissionDep = Annotated[Admission, Depends(admission_of)]
