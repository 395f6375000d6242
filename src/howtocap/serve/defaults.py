"""The server's defaults, written once for the CLI, ``serve`` and the guard's ``Limits``."""

HOST = "127.0.0.1"
PORT = 8000
MAX_K = 100
MAX_QUERY_CHARS = 500
RATE_LIMIT = 20.0  # requests per second per client
MAX_BODY_BYTES = 16_384
