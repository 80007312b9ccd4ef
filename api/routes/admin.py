"""API keys: admins create, list and revoke tenant keys."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status

from api.deps import AdminDep, ClockDep, IdPath, KeysDep
from api.schemas import KeyCreate, KeyCreated, KeyPublic, Message

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post("/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def create_key(body: KeyCreate, keys: KeysDep, clock: ClockDep, _admin: AdminDep) -> KeyCreated:
    """A new key for a tenant; the full key is in this answer only."""
    key_id, token = keys.create(body.tenant, body.name, clock(), admin=body.admin)
    return KeyCreated(id=key_id, tenant=body.tenant, key=token)


@router.get("/keys", response_model=list[KeyPublic])
def list_keys(keys: KeysDep, _admin: AdminDep, tenant: str | None = None) -> list[dict[str, Any]]:
    return keys.list(tenant)


@router.delete("/keys/{key_id}", response_model=Message)
def revoke_key(key_id: IdPath, keys: KeysDep, clock: ClockDep, _admin: AdminDep) -> dict[str, str]:
    keys.revoke(key_id, clock())
    return {"message": f"key {key_id} revoked"}
