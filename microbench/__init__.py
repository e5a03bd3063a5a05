"""Code that runs inside each rank: collective timing loops and their helpers."""
