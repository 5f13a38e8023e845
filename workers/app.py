"""The Celery app: queues ``init``, ``execute``, ``compaction`` on Redis (docs/deployment.md).

One setting names the broker: ``BATON_BROKER_URL`` (``CELERY_BROKER_URL`` is
honoured too); the result backend is the same Redis. With neither set, baton
runs embedded (``workers.embedded``) and this app is never used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from celery import Celery
from kombu import Queue

BROKER_ENVS = ("BATON_BROKER_URL", "CELERY_BROKER_URL")
REDIS_SCHEMES = ("redis", "rediss")  # rediss: Redis over TLS
QUEUES = ("init", "execute", "compaction")
# A step can run a whole evaluation (samples x time limit) plus a model call with
# retries; the broker must not hand its message to another worker meanwhile.
VISIBILITY_TIMEOUT_S = 4 * 3600
COMPACTION_PRIORITY = 0  # on Redis 0 is the highest priority (the reverse of RabbitMQ)
STEP_PRIORITY = 5


def broker_variable(env: Mapping[str, str] | None = None) -> str | None:
    """The variable that names the broker (the first of ``BROKER_ENVS`` set), None without one."""
    env = os.environ if env is None else env
    return next((name for name in BROKER_ENVS if env.get(name)), None)


def broker_url(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    name = broker_variable(env)
    return env[name] if name else None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be baton's broker, None when it can. The queues, the results (the app's backend is the
    same URL) and the agents' locks (redis-py, workers/tasks.py) all live on one Redis, and redis:// or
    rediss:// is the only form all three read: kombu takes ``notaurl`` for AMQP, Celery has no result backend
    for amqp:// or unix://, redis-py none for sentinel:// or redis+socket://. Found out when dispatching, such a
    URL failed after run.json was written; nothing here connects, and nothing returned quotes a password."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading the port is what checks it
    except ValueError as exc:  # a port that is no number, a broken IPv6 address: urllib's words quote no password
        return f"it cannot be read as a URL ({exc})"
    if parts.scheme.lower() not in REDIS_SCHEMES:
        said = f"{parts.scheme}://" if parts.scheme else "no scheme"
        return f"baton's queues, results and agent locks live on Redis, and this URL has {said}, not redis://"
    return None


# scheme://user:PASSWORD@ and ?password=PASSWORD: the two places a broker URL carries a secret.
_URL_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@]+@", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^\s&#;]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with its password shown as ``***``: the form every message and log line uses
    (kombu's ``;``-separated failover URLs included)."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", url))


def mask_secrets(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with every URL's password masked, and the configured broker's password too wherever
    it appears alone (an error message may quote it without its URL)."""
    text = mask_url(text)
    for part in (broker_url(env) or "").split(";"):
        try:
            password = urlsplit(part).password
        except ValueError:  # a malformed URL (e.g. a bad port): its userinfo was masked above
            continue
        if not password:
            continue
        for form in {password, unquote(password)}:
            if len(form) >= 4:  # a one-letter "password" would mask every such letter
                text = text.replace(form, "***")
    return text


def make_app(url: str | None = None) -> Celery:
    url = url or broker_url() or "redis://127.0.0.1:6379/0"
    app = Celery("baton", broker=url, backend=url, include=["workers.tasks", "workers.gate_tasks", "workers.reaper"])
    app.conf.update(
        task_queues=[Queue(name, routing_key=name) for name in QUEUES],
        task_default_queue="execute",
        task_acks_late=True,
        task_reject_on_worker_lost=True,  # a killed worker's step is delivered again
        worker_prefetch_multiplier=1,
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_track_started=True,
        task_serializer="json",
        accept_content=["json"],
        result_expires=24 * 3600,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": VISIBILITY_TIMEOUT_S,
            "queue_order_strategy": "priority",
            "priority_steps": list(range(10)),
        },
        result_backend_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
    )
    return app


app = make_app()
