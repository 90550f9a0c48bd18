#!/bin/sh
# One-shot job: wait for the Temporal frontend, then create the namespace Roundhouse uses (if it is not there yet).
set -eu
NAMESPACE=${DEFAULT_NAMESPACE:-default}
ADDRESS=${TEMPORAL_ADDRESS:-temporal:7233}
RETENTION=${NAMESPACE_RETENTION:-72h}

i=0
until temporal operator cluster health --address "$ADDRESS" >/dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -ge 60 ] && { echo "Temporal at $ADDRESS did not become healthy"; exit 1; }
  sleep 2
done
if temporal operator namespace describe -n "$NAMESPACE" --address "$ADDRESS" >/dev/null 2>&1; then
  echo "namespace '$NAMESPACE' already exists"
else
  temporal operator namespace create -n "$NAMESPACE" --retention "$RETENTION" --address "$ADDRESS"
  echo "namespace '$NAMESPACE' created"
fi
