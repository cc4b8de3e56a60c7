"""Admin routes (admin key): memory item management. Filled in by the admin issue."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/admin", tags=["admin"])
