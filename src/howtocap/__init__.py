"""howtocap: narrated instructional videos -> video-aligned captions and retrieval models."""

__version__ = "0.1.0"
