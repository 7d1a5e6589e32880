"""Settings for the test suite: the real settings, with a test secret key and fast hashing.

Everything else (database, channel layer) still comes from the environment, so the same suite
runs on SQLite + in-memory layer and on PostgreSQL + Redis (see `.ci/run`).
"""

import os
import tempfile

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-" + "k3y" * 20)
# Tests hold SQLite transactions open on purpose (other threads then wait for the write lock):
# a longer lock wait than production's 5 s keeps those from counting as an outage.
os.environ.setdefault("DATABASE_LOCK_WAIT", "20")
os.environ.setdefault("CARDLOOP_SECRET_DIR", tempfile.mkdtemp(prefix="cardloop-test-secrets-"))

from cardloop.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
# PostgreSQL runs with the same connection pool as production (CONN_MAX_AGE 0; Django closes
# the pool before it drops the test database).
