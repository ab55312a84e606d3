"""Destination kinds: one object per namespace carrying its routing, subscription, permission
resource and transaction behaviour (base.py says how; registry.py lists them)."""
