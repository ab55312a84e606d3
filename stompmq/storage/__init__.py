"""Stores: where queued messages, exchanges and bindings live (memory, SQLite, PostgreSQL)."""

from .base import Recovery, Store, StoredMessage, StoreError
from .records import BindingRecord, ExchangeRecord

__all__ = ["BindingRecord", "ExchangeRecord", "Recovery", "Store", "StoreError", "StoredMessage"]
