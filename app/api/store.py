"""Key-addressable memories: /v1/store (what the LangGraph store adapter calls).

Every route acts for the caller's user (from the credential); a namespace never names a user.
Writes are committed before the answer and drop the user's cached query results afterwards,
since query_memory returns store items like any other memory.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession

from app.http.deps import ResourcesDep, SessionDep, UserDep, WriteUserDep
from app.models import MemoryItem
from app.schemas.store import (
    NamespaceList,
    StoreAddress,
    StoreDeleted,
    StoreGet,
    StoreItemOut,
    StoreItemPage,
    StoreNamespaces,
    StorePut,
    StoreSearch,
    StoreSwept,
)
from app.services.store import TTL, StoreService, key_created_at, split

router = APIRouter(prefix="/v1/store", tags=["store"])


def _service(session: AsyncSession, resources: ResourcesDep) -> StoreService:
    """The store service; its writes drop the user's cached query results after commit."""
    return StoreService(session, resources.embeddings, resources.cache)


def _out(item: MemoryItem, score: float | None = None) -> StoreItemOut:
    return StoreItemOut(
        id=item.id,
        namespace=split(item.store_namespace or ""),
        key=item.store_key or "",
        value=item.metadata_.get("value", {}),
        type=item.type,
        created_at=key_created_at(item),
        updated_at=item.updated_at,
        score=score,
        expires_at=item.expires_at,
        ttl=item.metadata_.get(TTL),
    )


@router.put("/items", response_model=StoreItemOut)
async def put_item(
    body: StorePut, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> StoreItemOut:
    """Store a value at (namespace, key), replacing the value there; committed first."""
    item = await _service(session, resources).put(
        user_id, body.namespace, body.key, body.value, index=body.index, ttl=body.ttl
    )
    return _out(item)


@router.post("/items:get", response_model=StoreItemOut)
async def get_item(
    body: StoreGet, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> StoreItemOut:
    """The item at (namespace, key); 404 when there is none for this caller (or it expired)."""
    item = await _service(session, resources).get(
        user_id, body.namespace, body.key, refresh_ttl=body.refresh_ttl
    )
    return _out(item)


@router.post("/items:delete", response_model=StoreDeleted)
async def delete_item(
    body: StoreAddress, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> StoreDeleted:
    """Delete the item at (namespace, key) (a soft delete, as forget_memory); idempotent."""
    deleted = await _service(session, resources).delete(user_id, body.namespace, body.key)
    return StoreDeleted(deleted=deleted)


@router.post("/items:search", response_model=StoreItemPage)
async def search_items(
    body: StoreSearch, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> StoreItemPage:
    """Items under a namespace prefix: by meaning when `query` is given, else newest first."""
    found = await _service(session, resources).search(
        user_id,
        body.namespace_prefix,
        body.query,
        body.filter,
        limit=body.limit,
        offset=body.offset,
        refresh_ttl=body.refresh_ttl,
    )
    return StoreItemPage(items=[_out(f.item, f.score) for f in found])


@router.post("/namespaces", response_model=NamespaceList)
async def list_namespaces(
    body: StoreNamespaces, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> NamespaceList:
    """The caller's namespaces, filtered by prefix and suffix ('*' matches any label)."""
    namespaces = await _service(session, resources).namespaces(
        user_id, body.prefix, body.suffix, body.max_depth, limit=body.limit, offset=body.offset
    )
    return NamespaceList(namespaces=namespaces)


@router.post("/ttl:sweep", response_model=StoreSwept)
async def sweep_expired(
    user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> StoreSwept:
    """Delete the caller's expired items (LangGraph's TTL sweep); reads skip them already."""
    return StoreSwept(deleted=await _service(session, resources).sweep(user_id))
