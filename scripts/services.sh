#!/usr/bin/env bash
# Starts the local servers the tests talk to (../shared/SERVICES.md) if they are not answering,
# waits until each answers, and fails loudly naming the one that does not. Never skips.
set -euo pipefail

answers() { # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_for() { # name host port seconds
  local name=$1 host=$2 port=$3 deadline=$((SECONDS + $4))
  until answers "$host" "$port"; do
    if (( SECONDS >= deadline )); then
      echo "services: $name is not answering on $host:$port after $4 s" >&2
      return 1
    fi
    sleep 1
  done
  echo "services: $name answers on $host:$port"
}

ensure() { # name port seconds start-command...
  local name=$1 port=$2 seconds=$3
  shift 3
  if answers 127.0.0.1 "$port"; then
    echo "services: $name already answers on 127.0.0.1:$port"
    return 0
  fi
  echo "services: starting $name: $*"
  if ! "$@"; then
    echo "services: could not start $name with: $*" >&2
    return 1
  fi
  wait_for "$name" 127.0.0.1 "$port" "$seconds"
}

start_postgres() {
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
}
start_redis() {
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
}
start_rabbitmq() {
  rabbitmq-server -detached && rabbitmqctl await_startup --timeout 120
}
start_nats() {
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
}

start_tansu() {
  # Kafka-compatible broker, memory storage: it keeps nothing across restarts.
  export PATH="$HOME/.cargo/bin:$PATH"
  command -v tansu > /dev/null || { echo "services: tansu is not installed (scripts/prerequisites.sh)" >&2; return 1; }
  mkdir -p /var/log
  setsid nohup tansu broker --listener-url tcp://127.0.0.1:9092 --advertised-listener-url tcp://127.0.0.1:9092 \
    --storage-engine memory://tansu/ > /var/log/tansu.log 2>&1 < /dev/null &
  disown
}

ensure PostgreSQL 5432 60 start_postgres
ensure Redis 6379 30 start_redis
ensure RabbitMQ 5672 180 start_rabbitmq
ensure NATS 4222 30 start_nats
ensure "Kafka (tansu)" 9092 60 start_tansu
