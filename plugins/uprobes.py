"""The uprobes probe type (being written)."""
