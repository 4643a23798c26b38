"""The base layer: errors, progress records, the cycle collector's pauses and the themes; plain Python."""
