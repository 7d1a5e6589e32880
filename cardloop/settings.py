"""Cardloop settings, read from the environment (and an optional `.env`) with django-environ.

Every variable is listed in the README's configuration table. Infrastructure lives here;
feedback policy lives in the database and is edited in the admin.

Embedded default: SQLite in `var/` (WAL, busy timeout, immediate transactions) and the
in-memory channel layer, so a fresh clone runs with nothing else installed. At scale:
`DATABASE_URL=postgres://…` and `REDIS_URL=redis://…`.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import environ
from django.utils.translation import gettext_lazy as _

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# ---------------------------------------------------------------------------------------------
# Core
# ---------------------------------------------------------------------------------------------
DEBUG = env.bool("DJANGO_DEBUG", default=False)

#: Used only when DEBUG is on and no key is configured. The system check `cardloop.E001`
#: refuses to run production (DEBUG off) with this value or with no key at all.
DEV_SECRET_KEY = "django-insecure-cardloop-development-key-do-not-use-in-production"
#: Stands in when DEBUG is off and no key is set, so the check can say so clearly.
MISSING_SECRET_KEY = "cardloop-missing-secret-key"
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or (
    DEV_SECRET_KEY if DEBUG else MISSING_SECRET_KEY
)

ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS",
    default=["127.0.0.1", "localhost", "[::1]", "testserver"] if DEBUG else [],
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "cardloop.apps.CardloopConfig",
    "botadmin.apps.BotadminConfig",
    "interactions.apps.InteractionsConfig",
    "feedback.apps.FeedbackConfig",
    "analytics.apps.AnalyticsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # above CommonMiddleware: it reshapes the HTML 400 of a disallowed Host on API paths
    "plumbing.api.ApiErrorShapeMiddleware",
    "plumbing.api.RejectNulInUrlMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "cardloop.urls"
ASGI_APPLICATION = "cardloop.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---------------------------------------------------------------------------------------------
# Database: SQLite (WAL, busy timeout, BEGIN IMMEDIATE) by default, PostgreSQL via DATABASE_URL.
# ---------------------------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'cardloop.sqlite3'}")
}
_db = DATABASES["default"]
IS_SQLITE = _db["ENGINE"] in ("django.db.backends.sqlite3", "plumbing.db.sqlite3")
#: Seconds a SQLite writer waits for the write lock (SQLite's busy timeout) before the
#: database counts as locked for the process (`plumbing.db.outage`): writes then fail at once
#: (503 `database_unavailable`, the click's "try again in a moment") until a probe takes the
#: lock again. The test settings keep a longer one (a test may hold a transaction on purpose).
DATABASE_LOCK_WAIT = env.float("DATABASE_LOCK_WAIT", default=5.0)
#: Seconds between two reconnect probes while the database is known to be gone (PostgreSQL: a
#: fresh connect; SQLite: taking the write lock), `plumbing.db.outage`.
DATABASE_PROBE_INTERVAL = env.float("DATABASE_PROBE_INTERVAL", default=0.5)
if IS_SQLITE:
    # Django's backend, plus a fair process-wide queue for write transactions (plumbing.db).
    _db["ENGINE"] = "plumbing.db.sqlite3"
    _db.setdefault("OPTIONS", {}).update(
        {
            # Writers wait for each other instead of failing with "database is locked", and a
            # transaction takes the write lock at BEGIN, so read-then-write never deadlocks.
            "timeout": DATABASE_LOCK_WAIT,
            "transaction_mode": "IMMEDIATE",
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA foreign_keys=ON;"
                f"PRAGMA busy_timeout={round(DATABASE_LOCK_WAIT * 1000)};"
            ),
        }
    )
    # Tests use a file (not :memory:) so several threads and processes see the same data.
    _db.setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test_cardloop.sqlite3")
else:
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend whose connects feed the known-outage state (plumbing.db.outage):
        # while the database is unreachable requests fail at once instead of waiting in the
        # pool's line, and a probe notices its return within DATABASE_PROBE_INTERVAL.
        _db["ENGINE"] = "plumbing.db.postgresql"
    # Under Daphne/ASGI every request runs in a thread of its own, so persistent connections
    # (CONN_MAX_AGE > 0) pile up one per thread until PostgreSQL refuses clients ("too many
    # clients already"); Django's docs: disable them under ASGI and use the backend's pooling.
    # Each process gets one psycopg_pool of at most DATABASE_POOL_MAX_SIZE connections; a
    # thread's connection goes back to the pool when Django closes it (end of a request, a
    # callback handler, a worker tick). A thread that finds the pool empty waits in line
    # (FIFO) for up to DATABASE_POOL_TIMEOUT seconds, then gets OperationalError.
    # DATABASE_POOL=false (e.g. behind PgBouncer) connects per use instead.
    _db["CONN_MAX_AGE"] = 0
    _db.setdefault("CONN_HEALTH_CHECKS", True)  # with the pool: checked when taken from it
    if env.bool("DATABASE_POOL", default=True):
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
            "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=16),
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
            # While the database is gone the pool keeps trying to reconnect (for up to
            # reconnect_timeout seconds, then it shrinks and grows again on demand); its
            # retry delay is held short by `plumbing.db.pool.keep_reconnects_frequent`, so the
            # first request after the database returns gets a connection within about a second.
            "reconnect_timeout": env.float("DATABASE_POOL_RECONNECT_TIMEOUT", default=300.0),
        }
    if env.bool("DATABASE_PREPARED_STATEMENTS", default=False):
        # Server-side binding (psycopg's `Cursor`, not `ClientCursor`) and prepared statements:
        # once a pooled connection has run the same SQL text `prepare_threshold` times, psycopg
        # PREPAREs it (psycopg's docs, "Prepared statements"; Django's docs, "Server-side
        # parameters binding"). Not behind a PgBouncer in transaction mode that does not track
        # them (before 1.21). Off by default: a migration that changes a column's type makes
        # every prepared statement reading it fail ("cached plan must not change result type")
        # on running processes until they restart. `plan_cache_mode` force_custom_plan plans
        # each execution for its values: PostgreSQL's `auto` may switch to one generic plan,
        # which made the analytics' 365-day date ranges 1.9-2.4x slower (`bench/README.md`).
        plan_mode = env.str("DATABASE_PLAN_CACHE_MODE", default="force_custom_plan")
        options = _db.setdefault("OPTIONS", {})
        options["server_side_binding"] = True
        options["prepare_threshold"] = env.int("DATABASE_PREPARE_THRESHOLD", default=5)
        options["options"] = f"{options.get('options', '')} -c plan_cache_mode={plan_mode}".strip()
    # libpq's own connect timeout (whole seconds, at least 2): a connection attempt to a host
    # that does not answer gives up instead of hanging (the pool retries).
    _db.setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", max(2, math.ceil(env.float("DATABASE_CONNECT_TIMEOUT", default=0.8)))
    )
#: Seconds `/readyz` gives a fresh database connection (PostgreSQL: connect + `SELECT 1`;
#: SQLite: taking the write lock) before it reports the database down. It never waits in the
#: pool's line (`DATABASE_POOL_TIMEOUT`), so a probe sees an outage within a second.
DATABASE_CONNECT_TIMEOUT = env.float("DATABASE_CONNECT_TIMEOUT", default=0.8)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------------------------
# Channels: in-memory layer in one process, Redis (channels-redis) when REDIS_URL is set.
# ---------------------------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
#: Messages one channel (one WebSocket consumer) may hold before sends to it are dropped (the
#: ASGI spec drops group sends silently past capacity, so nothing may depend on them). A question panel receives a few
#: messages per ask; correctness never depends on delivery (panels resync with the database).
CHANNEL_CAPACITY = env.int("CARDLOOP_CHANNEL_CAPACITY", default=1000)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, shorter than the
                # layer's blocking BZPOPMIN: idle consumers would die with 1011 every ~5 s
                # (django/channels_redis#422). No client-side read timeout, as before redis 8.
                # Connections in use at once per process (redis-py's default is 100, and a
                # burst past it fails at once: 1000 panels closing together, bench/README).
                "hosts": [{"address": REDIS_URL, "socket_timeout": None, "max_connections": 1000}],
                "prefix": env.str("CARDLOOP_CHANNEL_PREFIX", default="cardloop"),
                "capacity": CHANNEL_CAPACITY,
                "expiry": 60,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            # channels' layer with its per-receive expiry sweep rate-limited (O(N²) fan-out)
            "BACKEND": "plumbing.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_CAPACITY, "expiry": 60},
        }
    }

# ---------------------------------------------------------------------------------------------
# Auth, i18n, static files
# ---------------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/dashboard/"

LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", _("Simplified Chinese")), ("en", _("English"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if not DEBUG
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Serve straight from the finders when nothing was collected (fresh clone, tests).
WHITENOISE_USE_FINDERS = env.bool("CARDLOOP_STATIC_FROM_FINDERS", default=True)
WHITENOISE_AUTOREFRESH = DEBUG

# ---------------------------------------------------------------------------------------------
# Production hardening (checked by `manage.py check --deploy` in CI)
# ---------------------------------------------------------------------------------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = env.list(
    "DJANGO_SILENCED_SYSTEM_CHECKS",
    # TLS is terminated by the load balancer in the documented deployment.
    # SQLite ignores the covering indexes' INCLUDE columns (PostgreSQL uses them); the
    # warning on every migrate of a fresh `make run` reads like a fault, so it is silenced.
    default=["security.W004", "security.W008"] + (["models.W040"] if IS_SQLITE else []),
)

# ---------------------------------------------------------------------------------------------
# REST framework and OpenAPI
# ---------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "botadmin.auth.BotApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["plumbing.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "plumbing.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Cardloop API",
    "DESCRIPTION": "Feedback, questions and approvals between a Feishu/Lark bot and its people.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The enum names, then the error body and the answers every path can give.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "plumbing.openapi.document_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ProgressStatusEnum": "interactions.models.ProgressSession.Status",
        "ProgressChannelEnum": "interactions.api.serializers.asks.PROGRESS_CHANNELS",
        "DeliveryChannelEnum": "feedback.models.Delivery.Channel",
        "ReviewItemStatusEnum": "analytics.models.review.ReviewItem.Status",
    },
}

# ---------------------------------------------------------------------------------------------
# Cardloop
# ---------------------------------------------------------------------------------------------
CARDLOOP_SECRET_DIR = Path(env.str("CARDLOOP_SECRET_DIR", default=str(VAR_DIR / "secrets")))
CARDLOOP_REPORT_TZ = env.str("CARDLOOP_REPORT_TZ", default="Asia/Shanghai")
#: The address people open Cardloop at (links in alert cards to the dashboard).
CARDLOOP_PUBLIC_URL = env.str("CARDLOOP_PUBLIC_URL", default="http://127.0.0.1:8000")
#: Seconds between two passes of `manage.py alert_worker` (alert rules, review queue fills).
CARDLOOP_ALERT_INTERVAL = env.float("CARDLOOP_ALERT_INTERVAL", default=30.0)
#: None = decide per bot (dry run when the bot has no app secret); True/False force it.
CARDLOOP_LARK_DRY_RUN = env.bool("CARDLOOP_LARK_DRY_RUN", default=None)
#: Tests only: point every lark-oapi client at a loopback stub (`http://127.0.0.1:<port>`).
CARDLOOP_LARK_DOMAIN = env.str("CARDLOOP_LARK_DOMAIN", default="")
# Slack Web API root (tests point it at a loopback stub); must end with "/".
CARDLOOP_SLACK_API_BASE_URL = env.str(
    "CARDLOOP_SLACK_API_BASE_URL", default="https://slack.com/api/"
)
# Telegram Bot API root (tests point it at a loopback stub); methods are <root>/bot<token>/<method>.
CARDLOOP_TELEGRAM_API_BASE_URL = env.str(
    "CARDLOOP_TELEGRAM_API_BASE_URL", default="https://api.telegram.org"
)
#: Sign in with Feishu: the app_id of the bot whose Feishu/Lark app signs people in (its app
#: secret exchanges the codes), and the tenant_key of the company that app belongs to (only its
#: accounts may sign in). Either unset: no sign-in with Feishu.
CARDLOOP_FEISHU_SIGNIN_APP = env.str("CARDLOOP_FEISHU_SIGNIN_APP", default="")
CARDLOOP_FEISHU_SIGNIN_TENANT = env.str("CARDLOOP_FEISHU_SIGNIN_TENANT", default="")
#: Tests only: allow webhook targets on loopback / private addresses (nothing else is lifted).
CARDLOOP_WEBHOOK_ALLOW_PRIVATE = env.bool("CARDLOOP_WEBHOOK_ALLOW_PRIVATE", default=False)
#: Attempts of one outbox row before it is dead (retryable failures only).
CARDLOOP_WEBHOOK_MAX_ATTEMPTS = env.int("CARDLOOP_WEBHOOK_MAX_ATTEMPTS", default=15)
#: Extra CA bundle (PEM) webhook receivers' certificates may chain to, besides certifi's
#: (tests: the trustme CA; production: a private PKI). Empty = certifi only.
CARDLOOP_WEBHOOK_CA_FILE = env.str("CARDLOOP_WEBHOOK_CA_FILE", default="")
#: Seconds a Feishu callback handler may run before the budget answers it (docs/CONTRACT.md).
#: Feishu waits 3 s, counted on its side, network included: 2.0 keeps 0.5 s for the network
#: between Feishu and Cardloop and 0.5 s for a loaded server's lateness (measured 22–60 ms
#: over loopback on a loaded 2-core machine); docs/CONTRACT.md, "3 seconds".
CARDLOOP_CALLBACK_BUDGET = env.float("CARDLOOP_CALLBACK_BUDGET", default=2.0)
#: Seconds a web process keeps a bot's row and secrets for its callbacks
#: (`botadmin.callbackcache`): a change to the bot takes effect at once in the process that
#: made it and within this many seconds in the others. 0 turns the cache off.
CARDLOOP_BOT_CACHE_SECONDS = env.float("CARDLOOP_BOT_CACHE_SECONDS", default=1.0)
#: Seconds a web process keeps a manager API token (with its user) and a user's team ids
#: (`botadmin.accesscache`): revoking a token, deactivating a user or changing a membership
#: takes effect at once in the process that made the change and within this many seconds in
#: the others. 0 turns the cache off.
CARDLOOP_ACCESS_CACHE_SECONDS = env.float("CARDLOOP_ACCESS_CACHE_SECONDS", default=1.0)
#: Analytics statements compiled to SQL once per shape and process (`plumbing.db.statements`);
#: false builds every statement through the ORM on every request.
CARDLOOP_STATEMENT_CACHE = env.bool("CARDLOOP_STATEMENT_CACHE", default=True)
#: Threads per web process that run Feishu card callbacks (decrypt, dedupe, handler). Their
#: work is database-bound: a few per process keep one core busy; raise it for a database with
#: slow round trips. Requests beyond it wait in line (the budget still answers them in time).
#: SQLite: 2, since its one writer makes more threads only contend for the GIL while one of
#: them holds the write lock (at 32 concurrent clicks 2 beat 4 in each of four interleaved
#: runs, by 4-44 %; bench/README.md); PostgreSQL: 4.
CARDLOOP_CALLBACK_THREADS = env.int("CARDLOOP_CALLBACK_THREADS", default=2 if IS_SQLITE else 4)
#: Seconds a claimed click's lease lasts (`InboundEvent.lease_until`): the process running its
#: handler renews it every third of that while the handler runs; a claim whose lease ran out
#: (its process died) is taken over by an identical retry or by the recovery in `card_worker`.
CARDLOOP_CLICK_LEASE = env.float("CARDLOOP_CLICK_LEASE", default=15.0)
#: Default expiry of approvals / quick replies (seconds).
CARDLOOP_INTERACTION_TIMEOUT = env.int("CARDLOOP_INTERACTION_TIMEOUT", default=300)
#: Default timeout of ask_user_questions (seconds).
CARDLOOP_ASK_TIMEOUT = env.int("CARDLOOP_ASK_TIMEOUT", default=15 * 60)
#: Seconds between MCP progress notifications of a tool call waiting for an answer.
CARDLOOP_MCP_PROGRESS_SECONDS = env.float("CARDLOOP_MCP_PROGRESS_SECONDS", default=10.0)
#: Question panels (`/ws/panel/`, interactions.panel_timing): seconds between presence refreshes of
#: a process's live panels, seconds after which an unrefreshed presence counts as gone (a
#: process that died), and seconds between each panel's resync with the database (missed or
#: dropped channel-layer pushes, and pushes that raced a reconnect, are repaired then).
CARDLOOP_PANEL_HEARTBEAT = env.float("CARDLOOP_PANEL_HEARTBEAT", default=20.0)
CARDLOOP_PANEL_PRESENCE_TTL = env.float("CARDLOOP_PANEL_PRESENCE_TTL", default=60.0)
CARDLOOP_PANEL_RESYNC = env.float("CARDLOOP_PANEL_RESYNC", default=60.0)
# 0 = half of CARDLOOP_PANEL_RESYNC, at most 10 s (interactions.panel_timing.resync_grace)
CARDLOOP_PANEL_RESYNC_GRACE = env.float("CARDLOOP_PANEL_RESYNC_GRACE", default=0.0)
#: `GET /metrics` (cardloop.metrics): the bearer token a Prometheus scraper sends, and the
#: addresses / CIDR networks that may scrape without it. With neither the endpoint refuses
#: every request. With DEBUG and no token, a token derived from SECRET_KEY (so `seed_demo`
#: prints the one `make run` serves with).
CARDLOOP_METRICS_TOKEN = env.str("CARDLOOP_METRICS_TOKEN", default="") or (
    "cmx_" + hashlib.sha256(f"metrics:{SECRET_KEY}".encode()).hexdigest()[:32] if DEBUG else ""
)
CARDLOOP_METRICS_ALLOW = env.list("CARDLOOP_METRICS_ALLOW", default=[])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "filters": {"one_line": {"()": "plumbing.logfilters.OneLineLog"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("CARDLOOP_LOG_LEVEL", default="INFO")},
    "loggers": {
        # Django's default config gives "django" a console handler of its own while DEBUG is
        # on, so every django.* line was printed twice (there and by the root handler)
        "django": {"handlers": [], "propagate": True},
        "django.request": {"level": "ERROR"},
        # one line a refused Host (it names the host), not a traceback
        "django.security.DisallowedHost": {"filters": ["one_line"]},
        "django.channels.server": {"level": "WARNING"},
        "Lark": {"level": "WARNING"},
        # One line per webhook request is the outbox's job (feedback.outbox), not httpx's.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
