"""The database a benchmark runs on: create the PostgreSQL database its `DATABASE_URL` names
when it does not exist yet, so `DATABASE_URL=postgres://…/cardloop_fb bench/….py` works on a
fresh machine instead of failing after the pool's 10 s timeout with a traceback.

    from benchdb import ensure_database
    ensure_database(os.environ.get("DATABASE_URL"))   # before django.setup()
"""

from __future__ import annotations

import sys

import environ

POSTGRES_ENGINES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")


def ensure_database(url: str | None) -> bool:
    """Create the PostgreSQL database named by `url` if the server does not have it.

    `url` is a django-environ database URL (`postgres://user[:password]@host:port/name`); None,
    SQLite and every other engine are left alone (SQLite creates its file on connect).
    Returns True when the database was created, False when there was nothing to do. Connects to
    the server's `postgres` maintenance database as the URL's user, as `createdb` does.
    Exits the process with a one-line message (no traceback) when the server cannot be reached
    or refuses the CREATE DATABASE (e.g. the user lacks CREATEDB).
    """
    if not url:
        return False
    config = environ.Env.db_url_config(url)
    if config.get("ENGINE") not in POSTGRES_ENGINES:
        return False
    import psycopg
    from psycopg import sql

    name = config["NAME"]
    params = {
        "dbname": "postgres",
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "connect_timeout": 5,
    }
    try:
        with psycopg.connect(**{k: v for k, v in params.items() if v is not None}) as conn:
            conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction block
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if exists:
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.DuplicateDatabase:
        return False  # another run created it between the look-up and the CREATE
    except psycopg.Error as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.exit(f"cannot prepare PostgreSQL database {name!r}: {first_line}")
    print(f"created PostgreSQL database {name!r}")
    return True
