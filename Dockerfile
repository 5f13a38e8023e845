# baton: one image for the three workers and Flower (docs/deployment.md).
# Secrets (ANTHROPIC_API_KEY, the Redis and Flower passwords) are never baked in:
# docker-compose.yml passes them at run time.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    BATON_SCENARIOS_DIR=/app/scenarios

# bubblewrap: the sandbox of code a model wrote, evaluation samples and the Bash tool (proving/sandbox/);
# without it evaluation and an enabled Bash refuse to run. It also needs user namespaces and the container
# options in docker-compose.yml (docs/deployment.md, "The sandbox in a container").
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*

# Dependencies first, read from pyproject.toml alone, so a code change does not
# reinstall them. The [otel] extra too: tracing stays off until an OTEL_* variable is set.
WORKDIR /src
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['otel']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# The project itself (.dockerignore lets in only these folders, without run outputs).
COPY context ./context
COPY agents ./agents
COPY proving ./proving
COPY scenarios ./scenarios
COPY workers ./workers
COPY importers ./importers
COPY baton ./baton
COPY prompts ./prompts
COPY setup.py ./
# The wheel carries the role prompts and the example scenario (pyproject.toml package-data): check
# that every prompt loads from the installed package. `python -P` keeps /src off sys.path, so
# `agents` is the installed package.
RUN pip install . \
 && python -P -c "from agents.prompts import prompt; [prompt(r, k) for r in ('init', 'execute') for k in ('system', 'compact')]" \
 && rm -rf /src

# Run as an unprivileged user. The workers write into the bind-mounted scenarios
# folder, so docker-compose.yml runs them as ${BATON_UID:-1000}:${BATON_GID:-1000}.
WORKDIR /app
RUN groupadd --gid 1000 baton \
 && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin baton \
 && mkdir -p /app/scenarios \
 && chown -R baton:baton /app
USER 1000:1000

CMD ["baton", "--help"]
