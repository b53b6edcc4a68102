#!/bin/bash
# Megatron-DeepSpeed launch script excerpt (Megatron argument names of microsoft/Megatron-DeepSpeed
# megatron/arguments.py; --deepspeed/--deepspeed_config from deepspeed.add_config_arguments).
# Written for the clustersim import tests; the JSON beside it is the DeepSpeed config.
deepspeed --num_nodes 2 --num_gpus 8 pretrain_gpt.py \
    --nnodes 2 --nproc_per_node 8 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --micro-batch-size 1 --global-batch-size 128 \
    --vocab-size 128256 --swiglu --normalization RMSNorm \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --position-embedding-type rope --bf16 \
    --train-iters 300 --log-interval 10 --save-interval 100 --eval-interval 50 \
    --zero-stage 3 --deepspeed --deepspeed_config megatron_deepspeed_zeropp.json \
    --deepspeed-activation-checkpointing --checkpoint-activations
