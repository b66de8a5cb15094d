#!/usr/bin/env bash
# The procedure's reference sequence (deploy-dynamo-recipe, steps 2 to 7), as written there: the same
# kubectl / curl / jq sequence, the 30 s Job polls, the 2 s port-forward polls and the 10 s
# model-listing polls. It is kept ONLY as the baseline for bench/bench_e2e.py; the harness
# (`pytest --iter=N`) is what deploys. Step 1 (the run-scoped copies under
# ${DEPLOY_ROOT}/applied_manifests/, with the storage-class placeholder resolved) is done by the caller.
#
# Parameters (environment):
#   KUBE_CONTEXT       kubectl context (every call pins --context; the current-context is never used)
#   NAMESPACE          target namespace
#   DEPLOY_ROOT        <EXP_ROOT>/artifacts/deploy-iter-NNN (holds applied_manifests/)
#   DGD_NAME           metadata.name of applied_manifests/deploy.yaml
#   FRONTEND_SERVICE   the frontend Service (normally ${DGD_NAME}-frontend)
#   SERVED_MODEL       the served model name
#   DOWNLOAD_JOB       metadata.name of the Job in model-download.yaml (empty: no such manifest)
#   VALIDATE_JOB       metadata.name of the Job in model-validate.yaml (empty: no such manifest)
#   LOCAL_PORT         local port of the port-forward (default 8000, as in the procedure)
#   SMOKE_PROMPT       default "Simply output the phrase: NVIDIA Dynamo"
#   ITERATION          > 0 runs step 3 with PREVIOUS_KUBE_CONTEXT / PREVIOUS_NAMESPACE / PREVIOUS_DGD
#   KUBECONFIG         as usual for kubectl
set -euo pipefail

: "${KUBE_CONTEXT:?}" "${NAMESPACE:?}" "${DEPLOY_ROOT:?}" "${DGD_NAME:?}" "${SERVED_MODEL:?}"
FRONTEND_SERVICE="${FRONTEND_SERVICE:-${DGD_NAME}-frontend}"
DOWNLOAD_JOB="${DOWNLOAD_JOB:-}"
VALIDATE_JOB="${VALIDATE_JOB:-}"
LOCAL_PORT="${LOCAL_PORT:-8000}"
SMOKE_PROMPT="${SMOKE_PROMPT:-Simply output the phrase: NVIDIA Dynamo}"
ITERATION="${ITERATION:-0}"
M="${DEPLOY_ROOT}/applied_manifests"

# ---- 2. Validate the assigned DGD (read-only) ----------------------------------------------------
kubectl --context "${KUBE_CONTEXT}" get namespace "${NAMESPACE}"
crds="$(kubectl --context "${KUBE_CONTEXT}" get crd 2>&1 || true)"
case "${crds}" in
  *Forbidden*) echo "WARN: cluster-scope CRD list forbidden for this identity; deferring to server dry-run" ;;
  *dynamographdeployment*) : ;;
  *) echo "Dynamo CRDs missing"; exit 1 ;;
esac
kubectl --context "${KUBE_CONTEXT}" get storageclass || echo "WARN: storageclass list forbidden; record as limitation"
kubectl --context "${KUBE_CONTEXT}" get nodes -o wide || echo "WARN: node list forbidden; record as limitation"
kubectl --context "${KUBE_CONTEXT}" apply --dry-run=server -n "${NAMESPACE}" -f "${M}/deploy.yaml"

# ---- 3. Retire the previous iteration (iteration > 0) --------------------------------------------
if [ "${ITERATION}" -gt 0 ]; then
  : "${PREVIOUS_DGD:?}"
  PREVIOUS_KUBE_CONTEXT="${PREVIOUS_KUBE_CONTEXT:-${KUBE_CONTEXT}}"
  PREVIOUS_NAMESPACE="${PREVIOUS_NAMESPACE:-${NAMESPACE}}"
  kubectl --context "${PREVIOUS_KUBE_CONTEXT}" delete dynamographdeployment "${PREVIOUS_DGD}" \
    -n "${PREVIOUS_NAMESPACE}" --wait=true --timeout=10m
  kubectl --context "${PREVIOUS_KUBE_CONTEXT}" wait --for=delete pod \
    -l nvidia.com/dynamo-graph-deployment-name="${PREVIOUS_DGD}" \
    -n "${PREVIOUS_NAMESPACE}" --timeout=10m
fi

# ---- 4. Apply support manifests ------------------------------------------------------------------
if [ -f "${M}/model-cache.yaml" ]; then
  kubectl --context "${KUBE_CONTEXT}" apply -f "${M}/model-cache.yaml" -n "${NAMESPACE}"
fi
if [ -f "${M}/model-download.yaml" ]; then
  kubectl --context "${KUBE_CONTEXT}" apply -f "${M}/model-download.yaml" -n "${NAMESPACE}"
  job_state=""
  for _ in $(seq 1 200); do  # 200 x 30s = 100 min bound
    # a successful Job on Kubernetes 1.31+ carries BOTH SuccessCriteriaMet and Complete: match by substring
    job_state="$(kubectl --context "${KUBE_CONTEXT}" get "job/${DOWNLOAD_JOB}" -n "${NAMESPACE}" \
      -o jsonpath='{.status.conditions[?(@.status=="True")].type}')"
    case "${job_state}" in *Failed*) echo "download job failed"; exit 1;; *Complete*) break;; esac
    sleep 30
  done
  case "${job_state}" in *Complete*) : ;; *) echo "download job timed out"; exit 1;; esac
fi
if [ -f "${M}/model-validate.yaml" ]; then
  kubectl --context "${KUBE_CONTEXT}" apply -f "${M}/model-validate.yaml" -n "${NAMESPACE}"
  job_state=""
  for _ in $(seq 1 120); do  # 120 x 30s = 60 min bound
    job_state="$(kubectl --context "${KUBE_CONTEXT}" get "job/${VALIDATE_JOB}" -n "${NAMESPACE}" \
      -o jsonpath='{.status.conditions[?(@.status=="True")].type}')"
    case "${job_state}" in *Failed*) echo "validate job failed"; exit 1;; *Complete*) break;; esac
    sleep 30
  done
  case "${job_state}" in *Complete*) : ;; *) echo "validate job timed out"; exit 1;; esac
fi

# ---- 5. Apply the assigned DGD -------------------------------------------------------------------
kubectl --context "${KUBE_CONTEXT}" apply -f "${M}/deploy.yaml" -n "${NAMESPACE}"
kubectl --context "${KUBE_CONTEXT}" get dynamographdeployment -n "${NAMESPACE}"
kubectl --context "${KUBE_CONTEXT}" get pods -n "${NAMESPACE}" -o wide
kubectl --context "${KUBE_CONTEXT}" get svc -n "${NAMESPACE}"

# ---- 6. Wait for readiness (the healthy signals, with kubectl wait) ------------------------------
if [ -f "${M}/model-cache.yaml" ]; then
  kubectl --context "${KUBE_CONTEXT}" wait --for=jsonpath='{.status.phase}'=Bound pvc --all \
    -n "${NAMESPACE}" --timeout=10m
fi
kubectl --context "${KUBE_CONTEXT}" wait --for=condition=Ready "dynamographdeployment/${DGD_NAME}" \
  -n "${NAMESPACE}" --timeout=30m
kubectl --context "${KUBE_CONTEXT}" wait --for=condition=Ready pod \
  -l nvidia.com/dynamo-graph-deployment-name="${DGD_NAME}" -n "${NAMESPACE}" --timeout=30m
kubectl --context "${KUBE_CONTEXT}" get svc "${FRONTEND_SERVICE}" -n "${NAMESPACE}"

# ---- 7. Smoke test (port-forward and curl in ONE shell session) ----------------------------------
SMOKE_DIR="${DEPLOY_ROOT}/smoke"
mkdir -p "${SMOKE_DIR}"
kubectl --context "${KUBE_CONTEXT}" port-forward "svc/${FRONTEND_SERVICE}" "${LOCAL_PORT}:8000" -n "${NAMESPACE}" &
PF_PID=$!
trap 'kill "${PF_PID}" 2>/dev/null' EXIT
ready=0
for _ in $(seq 1 30); do
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${LOCAL_PORT}/v1/models" || true)"
  [ "${code}" -ge 100 ] && { ready=1; break; }  # any HTTP response = port forwards; smoke gates judge health
  sleep 2
done
[ "${ready}" = "1" ] || { echo "port-forward never became reachable"; exit 1; }
listed=0
models_code=""
for _ in $(seq 1 30); do  # 5 min bound
  models_code="$(curl -sS -o "${SMOKE_DIR}/models_body.json" -w '%{http_code}' \
    "http://127.0.0.1:${LOCAL_PORT}/v1/models" || true)"
  if [ "${models_code}" -ge 200 ] && [ "${models_code}" -lt 300 ] && \
     jq -e --arg model "${SERVED_MODEL}" 'any(.data[]?; .id == $model)' "${SMOKE_DIR}/models_body.json" >/dev/null; then
    listed=1; break
  fi
  sleep 10
done
[ "${listed}" = "1" ] || { echo "served model never listed (last code ${models_code})"; exit 1; }
api_request="$(jq -nc --arg model "${SERVED_MODEL}" --arg prompt "${SMOKE_PROMPT}" '{
  model: $model, messages: [{role: "user", content: $prompt}], max_tokens: 100, temperature: 0 }')"
api_code="$(curl -sS -o "${SMOKE_DIR}/api_body.json" -w '%{http_code}' \
  "http://127.0.0.1:${LOCAL_PORT}/v1/chat/completions" -H 'Content-Type: application/json' -d "${api_request}")"
[ "${api_code}" -ge 200 ] && [ "${api_code}" -lt 300 ] || { echo "chat endpoint ${api_code}"; exit 1; }
jq -e '.object == "chat.completion" and (.choices | type == "array" and length > 0) and (.error | not)' \
  "${SMOKE_DIR}/api_body.json" >/dev/null || { echo "chat response failed structural check"; exit 1; }
echo "smoke_success=1 models_code=${models_code} api_code=${api_code}"
