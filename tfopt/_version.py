"""tfopt's version, read by setup.cfg and written into every manifest."""

__version__ = "0.1.0"
