"""Files copied into the kind provider's Python image (``python_image.py``): the hub replica and ``hf``."""
