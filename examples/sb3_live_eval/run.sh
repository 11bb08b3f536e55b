#!/usr/bin/env bash
# Runs the example: a local stack, then the trainer, the eval fleet and `join --follow`,
# each a process of its own, as they would be on different machines.
#
#   ./run.sh start   # stack up (if needed), topics and schemas, the three processes
#   ./run.sh wait    # until the trainer is done, every checkpoint evaluated and written
#   ./run.sh stop    # SIGTERM to the three (the follower makes a last pass and exits 0)
#   ./run.sh         # start, wait, stop
#
# Everything lands in $WORK (default ./work, one run per folder): runs/ (TensorBoard: PPO_1 and PPO_1_eval),
# checkpoints/, follow.duckdb (the follower's store and position), logs/*.log, pids.
# Settings: TIMESTEPS (30000), SAVE_FREQ (5000), EPISODES (5 per checkpoint).
# `rlmesh-stream infra down` stops the stack.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mkdir -p "${WORK:-work}" && cd "${WORK:-work}" && pwd)
TIMESTEPS=${TIMESTEPS:-30000}
SAVE_FREQ=${SAVE_FREQ:-5000}
EPISODES=${EPISODES:-5}
PY=${PYTHON:-python}

start() {
    if [ -e "$WORK/pids" ]; then
        echo "Error: $WORK/pids exists: a run is going on there (./run.sh stop, or WORK=...)" >&2
        exit 1
    fi
    if [ -e "$WORK/runs" ]; then
        echo "Error: $WORK holds a previous run (runs/): remove it, or set WORK=another folder" >&2
        exit 1
    fi
    mkdir -p "$WORK/logs"
    rlmesh-stream infra up
    # Topics of this run's own: a second run of the example would otherwise find the
    # first run's rl_model_5000_steps episodes in the same topics, under the same names.
    export RLMESH_STREAM_TOPIC_PREFIX=${RLMESH_STREAM_TOPIC_PREFIX:-sb3-example.$(date +%s)}
    echo "$RLMESH_STREAM_TOPIC_PREFIX" > "$WORK/topic-prefix"
    rlmesh-stream topics create
    rlmesh-stream schemas register
    cd "$WORK"
    "$PY" "$HERE/eval_fleet.py" --checkpoints checkpoints --episodes "$EPISODES" \
        --stop-after trainer.done > logs/eval_fleet.log 2>&1 &
    echo "eval_fleet $!" >> pids
    "$PY" "$HERE/train.py" --timesteps "$TIMESTEPS" --save-freq "$SAVE_FREQ" \
        --runs runs --checkpoints checkpoints --done-file trainer.done > logs/train.log 2>&1 &
    echo "train $!" >> pids
    # The follower once the trainer's log directory exists (its --log must); it reads the
    # episode topics from their beginning, so it misses nothing published before it starts.
    until [ -d runs/PPO_1 ]; do
        kill -0 "$(pid_of train)" 2>/dev/null || { echo "Error: the trainer exited; see $WORK/logs/train.log" >&2; exit 1; }
        sleep 1
    done
    # It shows what it waits for (checkpoints seen, episodes per checkpoint) in logs/follow.log.
    rlmesh-stream join --follow --sink duckdb://follow.duckdb --log runs/PPO_1 \
        --checkpoint-step 'rl_model_(\d+)_steps' --metric train/loss \
        --eval-episodes "$EPISODES" --to-tensorboard runs/PPO_1_eval \
        2> logs/follow.log > /dev/null &
    echo "follow $!" >> pids
    echo "started in $WORK (topics $RLMESH_STREAM_TOPIC_PREFIX.*); tensorboard --logdir $WORK/runs"
}

pid_of() { awk -v n="$1" '$1 == n {print $2}' "$WORK/pids"; }

wait_done() {
    local expected=$(( TIMESTEPS / SAVE_FREQ ))
    echo "waiting for the trainer, the eval fleet and $expected points"
    while kill -0 "$(pid_of train)" 2>/dev/null || kill -0 "$(pid_of eval_fleet)" 2>/dev/null \
            || [ "$(grep -c '^follow: wrote ' "$WORK/logs/follow.log" || true)" -lt "$expected" ]; do
        if ! kill -0 "$(pid_of follow)" 2>/dev/null; then
            echo "Error: the follower exited; see $WORK/logs/follow.log" >&2
            return 1
        fi
        sleep 2
    done
    grep '^follow: wrote ' "$WORK/logs/follow.log"
}

stop() {
    [ -e "$WORK/pids" ] || { echo "nothing running in $WORK"; return 0; }
    local name pid
    while read -r name pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" && echo "stopped $name ($pid)"
        fi
    done < "$WORK/pids"
    rm -f "$WORK/pids"
}

case "${1:-all}" in
    start) start ;;
    wait) wait_done ;;
    stop) stop ;;
    all) start; trap stop EXIT; wait_done ;;
    *) echo "Error: unknown command '$1' (start, wait, stop)" >&2; exit 1 ;;
esac
