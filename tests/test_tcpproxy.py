"""The fault-test TCP proxy forwards, cuts (refuse and blackhole) and heals a real PostgreSQL link."""

import psycopg
import pytest

from tests.tcpproxy import TcpProxy


def test_proxy_forwards_cuts_and_heals_a_postgres_connection():
    with TcpProxy("127.0.0.1", 5432) as p:
        dsn = f"host=127.0.0.1 port={p.port} user=postgres dbname=postgres connect_timeout=2"
        with psycopg.connect(dsn) as c:
            assert c.execute("select 1").fetchone() == (1,)
            p.cut()
            with pytest.raises(psycopg.OperationalError):
                c.execute("select 1")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn)
        p.heal()
        with psycopg.connect(dsn) as c:
            assert c.execute("select 2").fetchone() == (2,)
        p.cut("blackhole")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn)
        p.heal()
