#!/usr/bin/env bash
# The LocalStack path end to end (docs/localstack.md): deploy the stack variant that needs no MSK into a running
# LocalStack, invoke the processor with a recorded MSK event, run one checkpoint, then `eos status` and
# `eos verify` against it.
#
# Needs: a running LocalStack (the free edition is enough for this path) on $LOCALSTACK_ENDPOINT, `cdklocal`
# (`npm install --no-save aws-cdk-local`, found through node_modules/.bin) and `awslocal` (pip install awscli-local).
# Usage: scripts/localstack.sh [deploy|invoke|checkpoint|check|all]   (default: all)
set -euo pipefail

ENDPOINT="${LOCALSTACK_ENDPOINT:-http://localhost.localstack.cloud:4566}"
PIPELINE="${EOS_PIPELINE_ID:-orders}"
STACK="ExactlyOncePipeline-${PIPELINE}"
EVENT="examples/localstack/msk-event.json"
# The recorded event's cluster: the processor accepts only events from the cluster it was deployed for.
CLUSTER_ARN="$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")).eventSourceArn)' "$EVENT")"
OUT_DIR="${TMPDIR:-/tmp}/eos-localstack"
OUTPUTS="$OUT_DIR/outputs.json"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"

cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
mkdir -p "$OUT_DIR"

say() { printf '[localstack] %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# One stack output by the end of its key (CloudFormation prefixes construct outputs with their path and a hash).
output() {
  node -e '
    const [file, stack, suffix] = process.argv.slice(1);
    const outputs = JSON.parse(require("fs").readFileSync(file, "utf8"))[stack] ?? {};
    const key = Object.keys(outputs).find((k) => k.replace(/[0-9A-F]{8}$/, "").endsWith(suffix));
    if (!key) { console.error(`no output ending in ${suffix} in ${file}`); process.exit(1); }
    process.stdout.write(outputs[key]);' "$OUTPUTS" "$STACK" "$1"
}

check_localstack() {
  curl -fsS "$ENDPOINT/_localstack/health" >/dev/null ||
    fail "LocalStack does not answer on $ENDPOINT (start it: localstack start -d, or docker run -p 4566:4566 localstack/localstack)"
}

deploy() {
  say "deploying $STACK (no event source mapping: the processor is invoked with a recorded event)"
  cdklocal bootstrap
  cdklocal deploy "$STACK" --require-approval never --outputs-file "$OUTPUTS" \
    -c mskClusterArn="$CLUSTER_ARN" -c topic=orders -c pipelineId="$PIPELINE" \
    -c eventSourceMapping=false -c outputs=true \
    -c removalPolicy=destroy -c deletionProtection=false -c pointInTimeRecovery=false
}

invoke() {
  local fn
  fn="$(output ProcessorFunctionName)"
  say "invoking $fn with $EVENT"
  awslocal lambda invoke --function-name "$fn" --cli-binary-format raw-in-base64-out \
    --payload "fileb://$EVENT" "$OUT_DIR/invoke.json" >/dev/null
  cat "$OUT_DIR/invoke.json" >&2; echo >&2
  grep -q '"errorMessage"' "$OUT_DIR/invoke.json" && fail "the processor failed (above)"
  return 0
}

checkpoint() {
  local machine execution status
  machine="$(output StateMachineArn)"
  say "running one checkpoint ($machine)"
  execution="$(awslocal stepfunctions start-execution --state-machine-arn "$machine" --query executionArn --output text)"
  for _ in $(seq 1 120); do
    status="$(awslocal stepfunctions describe-execution --execution-arn "$execution" --query status --output text)"
    [ "$status" != RUNNING ] && break
    sleep 1
  done
  say "checkpoint execution: $status"
  [ "$status" = SUCCEEDED ] || fail "the checkpoint did not succeed: awslocal stepfunctions get-execution-history --execution-arn $execution"
}

check() {
  npx eos status --endpoint "$ENDPOINT" --pipeline "$PIPELINE" --table "$(output LedgerTableName)"
  npx eos verify --endpoint "$ENDPOINT" --pipeline "$PIPELINE" --bucket "$(output BucketName)"
}

step="${1:-all}"
check_localstack
case "$step" in
  deploy) deploy ;;
  invoke) invoke ;;
  checkpoint) checkpoint ;;
  check) check ;;
  all) deploy; invoke; checkpoint; check ;;
  *) fail "usage: scripts/localstack.sh [deploy|invoke|checkpoint|check|all]" ;;
esac
