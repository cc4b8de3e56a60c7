"""ORM models; importing this package registers every table on Base.metadata."""

from app.models.api_key import ApiKey
from app.models.base import Base
from app.models.conversation import Conversation, Message, MessagePassage
from app.models.extraction import ExtractionJob, ExtractionUsage
from app.models.memory import MemoryItem, SearchPosting, SearchStats
from app.models.space import Space, SpaceMember

__all__ = [
    "ApiKey",
    "Base",
    "Conversation",
    "ExtractionJob",
    "ExtractionUsage",
    "MemoryItem",
    "Message",
    "MessagePassage",
    "SearchPosting",
    "SearchStats",
    "Space",
    "SpaceMember",
]
