# One image for web, worker, beat and agent (the production shape in docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY requirements.txt ./
RUN pip install -r requirements.txt
COPY . .
RUN pip install --no-deps -e sdk \
 && DJANGO_SETTINGS_MODULE=portal.settings.base python manage.py collectstatic --noinput -v0
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "-b", "0.0.0.0:8000", "-w", "4", "--threads", "4"]
