"""Stores: where queued messages, exchanges and bindings live (memory, SQLite, PostgreSQL)."""

from .base import BindingRecord, ExchangeRecord, Recovery, Store, StoredMessage, StoreError

__all__ = ["BindingRecord", "ExchangeRecord", "Recovery", "Store", "StoreError", "StoredMessage"]
