#!/bin/bash
# Megatron-LM launch script excerpt (argument names of megatron/training/arguments.py,
# NVIDIA/Megatron-LM commit 001b00c2). Written for the clustersim import tests.
GPUS_PER_NODE=8
torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 1 \
    --sequence-parallel \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --micro-batch-size 1 --global-batch-size 128 \
    --vocab-size 128256 --swiglu --normalization RMSNorm \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --position-embedding-type rope --bf16 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --lr 3.0e-4 --min-lr 3.0e-5 --lr-decay-style cosine --weight-decay 0.1 \
    --train-iters 300 --log-interval 10 --log-throughput \
    --save-interval 100 --eval-interval 50 --eval-iters 10 \
    --save /checkpoints/llama3-8b --data-path /data/text_document \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B
