"""The Textual explorer. Never imports torch: it talks to the model through a backend object given to it."""
