# One image for web, worker, beat, bootstrap and agent (the production shape in docker-compose.yml).
# Runtime packages only (requirements.txt: no test, lint or browser tool); runs as the unprivileged
# user `trainyard`, which owns nothing but its state directories.
#
# BASE_IMAGE: any Debian-based Python 3.11+ image; name a locally built one where no registry is
# reachable. PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS reach pip as build arguments,
# e.g. a mirror, or https://download.pytorch.org/whl/cpu for the smaller CPU-only torch 2.13.0
# (web and worker need no CUDA; GPU agents want PyPI's default CUDA build). `make deploy-check`
# (scripts/deploy-check) builds such a base image and serves local wheels this way.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TRAINYARD_VAR_DIR=/var/lib/trainyard

# Fixed ids, so volumes keep their owner across rebuilds. The state directories exist (owned by
# trainyard) before compose mounts named volumes there: a new volume takes their owner.
RUN groupadd --system --gid 10001 trainyard \
 && useradd --system --uid 10001 --gid trainyard --home-dir /home/trainyard --create-home \
        --shell /usr/sbin/nologin trainyard \
 && install -d -o trainyard -g trainyard -m 0750 \
        /var/lib/trainyard /var/lib/trainyard/artifacts /var/lib/trainyard/beat /var/lib/trainyard-agent

WORKDIR /app
COPY requirements.txt ./
RUN pip install -r requirements.txt
COPY sdk ./sdk
# setuptools is in requirements.txt, so the SDK builds without fetching a build backend.
RUN pip install --no-deps --no-build-isolation ./sdk && rm -rf sdk/build
COPY . .
# Static files live in the image (not in a volume), so a new image serves its own CSS and JS.
RUN DJANGO_SETTINGS_MODULE=portal.settings.base python manage.py collectstatic --noinput -v0 \
 && python -m compileall -q apps portal agents recipes

USER trainyard
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "-b", "0.0.0.0:8000", "-w", "4", "--threads", "4"]
