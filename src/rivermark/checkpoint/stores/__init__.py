"""Where checkpoints live, and what makes one exist and trusted.

The Store interface and the integrity checks every store makes (storebase), the
local directory (store), object storage (objectstore) and its lock without a
shared file system (lease), the manifest that makes a checkpoint exist
(manifest), signatures (signing), user-given names as file names (names).
"""
