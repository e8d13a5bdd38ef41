FROM python:3.13-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY console console
COPY triage triage
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir . \
 && DEBUG=1 python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["gunicorn", "console.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
