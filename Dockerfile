# The notary image (target "notary", the default): the service only (notary/ and what it
# imports, pinned by deploy/constraints.txt). The replay image (target "replay": the target
# farm, trace replay, the study) and a load-generator image (target "locust") build on it.
#   docker build -t converge-notary .      docker build --target replay -t converge-replay .
#   docker build --target locust -t converge-locust .
FROM python:3.11-slim AS notary
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin notary \
 && mkdir -p /data /keys /farm /reports \
 && chown notary:notary /data /keys /farm /reports
WORKDIR /app
COPY pyproject.toml README.md deploy/constraints.txt ./
COPY notary ./notary
RUN pip install --no-cache-dir --constraint constraints.txt .
USER notary
# 8443: the notary (legacy protocol, TLS); 9100: metrics and health, worker i on 9100+i
EXPOSE 8443 9100
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9100/healthz', timeout=2)"]
ENTRYPOINT ["notary"]
CMD ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:8443", "--metrics-listen", "127.0.0.1:9100"]

FROM notary AS replay
USER root
COPY replay ./replay
RUN pip install --no-cache-dir --constraint constraints.txt '.[replay]'
USER notary
HEALTHCHECK NONE
ENTRYPOINT ["replay"]
CMD ["--help"]

FROM notary AS locust
USER root
RUN pip install --no-cache-dir "locust>=2.20"
COPY loadtests ./loadtests
USER notary
EXPOSE 8089 5557
HEALTHCHECK NONE
ENTRYPOINT ["locust"]
CMD ["--help"]
