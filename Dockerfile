# syntax=docker/dockerfile:1
# Roundhouse worker image: compiled code, production dependencies only, the prebuilt workflow bundle, non-root.

# --- build: compile TypeScript and bundle the workflows once (dist/workflow-bundle.js) ---
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the postinstall only fetches the Temporal dev-server CLI, which an image never needs.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build-dist.js scripts/
COPY config config
COPY workflows workflows
COPY activities activities
COPY providers providers
COPY emulator emulator
COPY workers workers
COPY cli cli
RUN npm run build

# --- production dependencies only ---
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# --- runtime ---
FROM node:20-bookworm-slim
# JSON log lines: in a container a log collector reads them, not a person.
ENV NODE_ENV=production \
    ROUNDHOUSE_LOG_FORMAT=json \
    ROUNDHOUSE_STATE_DIR=/var/lib/roundhouse \
    ROUNDHOUSE_WORKFLOW_BUNDLE=/app/dist/workflow-bundle.js
WORKDIR /app
COPY --from=deps /app/node_modules node_modules
COPY --from=build /app/dist dist
COPY package.json ./
COPY bin bin
RUN mkdir -p /var/lib/roundhouse/emulator && chown -R node:node /var/lib/roundhouse
# The official image's unprivileged user (uid 1000).
USER node
EXPOSE 9464
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "bin/roundhouse.js"]
CMD ["worker"]
