#!/bin/bash
# A Megatron-LM launch script in the layout of NVIDIA's examples (a pipescope example, for `pipescope import megatron
# --script`): GPT-3 175B on 128 nodes, tp 8 x pp 16, interleaved, the distributed optimizer.
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-128}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=$1 # <Specify path>
DATA_PATH=$4 #<Specify path and file prefix>_text_document
TP=8
PP=16

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --rampup-batch-size 16 16 5859375
    --train-iters 500000
    --weight-decay 0.1
    --lr 6.0e-5
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce
    --recompute-granularity "selective"
)

MODEL_PARALLEL_ARGS="--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} --num-layers-per-virtual-pipeline-stage 2"

DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-size 50257
    --split 949,50,1
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    $MODEL_PARALLEL_ARGS \
    ${DATA_ARGS[@]} \
    --save "$CHECKPOINT_PATH" --load "$CHECKPOINT_PATH"
