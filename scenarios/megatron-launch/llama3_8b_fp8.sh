#!/bin/bash
# A Megatron-LM launch script in the layout of NVIDIA's Llama-3 8B FP8 example on one DGX H100 (a pipescope example,
# for `pipescope import megatron --script`): its arguments gathered in arrays, the FP8 and data arguments appended
# under `if` tests, the data-parallel arguments appended to the training ones. Data-parallel 8, the distributed
# optimizer with both overlaps.
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"}
DATA_ARG=${4:-"MOCK"}
GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
PRETRAIN_SCRIPT_PATH="examples/classes/pretrain_gpt.py"
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
DTYPE="fp8"
SEQ_LENGTH=8192
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --rotary-base 1000000
    --swiglu
    --attention-backend fused
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --lr 0.00015
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --manual-gc
)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
)
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")
DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]]; then
    DATA_ARGS_LIST+=(
        "--mock-data"
        "--vocab-size 128256"
        "--split '99,1,0'"
    )
else
    DATA_ARGS_LIST+=(
        "--data-path $DATA_ARG"
        "--vocab-size 128256"
    )
fi
torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]}
