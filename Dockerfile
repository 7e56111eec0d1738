# The image manifests/base/deployment.yaml runs: mcad installed from this tree.
#   docker build -t registry.example.com/mcad:0.1.0 .
#   (cd manifests/base && kustomize edit set image mcad=registry.example.com/mcad:0.1.0)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mcad ./mcad
RUN python -m venv /opt/mcad \
 && /opt/mcad/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/mcad/bin/pip install --no-cache-dir .

FROM python:3.11-slim
# The same numeric user the Deployment asks for (runAsUser 65532), with no shell login.
RUN groupadd --gid 65532 mcad && useradd --uid 65532 --gid 65532 --no-create-home \
      --shell /usr/sbin/nologin mcad
COPY --from=build /opt/mcad /opt/mcad
ENV PATH=/opt/mcad/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["mcad"]
CMD ["run", "--metrics-address=:8080"]
