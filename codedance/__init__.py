"""codedance: executable visual reasoning (the CodeDance paper, arXiv 2512.17312).

A vision-language model answers questions about images by writing Python that crops, zooms,
draws, measures and computes; a transactional sandbox (`codedance.sandbox`) runs each snippet and
returns text and images; the model reflects and continues or answers.

Importing this package pulls in only the standard library; numpy and Pillow are imported by the
modules that need them, and torch, transformers and verl only by `codedance.integrations`.
"""

__version__ = "0.1.0"
