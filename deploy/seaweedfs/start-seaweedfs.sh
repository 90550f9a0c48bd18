#!/bin/sh
# The compose stack's object store: SeaweedFS (Apache-2.0) with its S3 API on :8333, one identity whose keys come
# from the environment (S3_ACCESS_KEY_ID / S3_SECRET_ACCESS_KEY, from .env), never from a file in the repository.
set -eu
: "${S3_ACCESS_KEY_ID:?set ROUNDHOUSE_S3_ACCESS_KEY_ID in .env}"
: "${S3_SECRET_ACCESS_KEY:?set ROUNDHOUSE_S3_SECRET_ACCESS_KEY in .env}"
config=/tmp/s3.json
umask 077
cat >"$config" <<JSON
{"identities":[{"name":"roundhouse","credentials":[{"accessKey":"$S3_ACCESS_KEY_ID","secretKey":"$S3_SECRET_ACCESS_KEY"}],"actions":["Admin","Read","List","Tagging","Write"]}]}
JSON
exec weed server -dir=/data -s3 -s3.port=8333 -s3.config="$config"
