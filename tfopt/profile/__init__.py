"""``tfopt profile``: what holds back a Keras training script, measured without changing it
(docs/profile.md)."""
