"""Client for the Factory Memory agent API (no Django imports)."""
