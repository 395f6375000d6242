"""The ``framecaps`` step (Ventura et al.): video labels from image captioners."""
