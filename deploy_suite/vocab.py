"""The suite's vocabularies (filled by the layout change)."""
