"""Reading what users give us (videos, subtitles, manifests) and writing what we export."""
