"""The fleet twin and its benchmark (issue 14)."""
