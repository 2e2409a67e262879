// ipc_ring_threads: ipc_ring's very kernels (ring and one-shot, the same
// counters, descriptors and deadlines) with the ranks as threads of one
// process on one GPU, each with its own stream. Peers' regions are plain
// device pointers exchanged in-process (ThreadGroup) instead of CUDA IPC
// handles, so all ranks' kernels share one context and run side by side
// rather than time-slicing as separate processes' do: what a one-GPU machine
// can say about the protocol under real concurrency and about the kernels'
// speed (bench/allreduce_threads_bench against a copy-and-add floor). NCCL
// has no such mode: it refuses two ranks on one GPU.
//
// Ranks line up on the host before every launch (ThreadGroup::Arrive), so no
// rank's kernel ever spins waiting for a peer that is still inside a CUDA
// call that synchronises the device (cudaMalloc, cudaFree, a legacy-stream
// copy) between two collectives: the kernels would otherwise deadlock with
// that call until their deadline. Streams are non-blocking for the same
// reason; each launch still waits for work already issued to the legacy
// default stream, so a caller's cudaMemcpy is complete before it is read.
//
// A rank's region is freed only after every peer has left (stopped its
// kernel and said so); otherwise it is leaked, never freed under a peer.
//
// Run the ranks with comm::RunRankThreads (or any threads that share one
// Store and have this process as every rank's peer); call
// PrepareProcessForRankThreads() (comm/job/rank_threads.h) before the
// process first uses CUDA. The device is options.cuda_device, or device 0
// when it is -1, and must be the same on every rank; data pointers are
// device pointers on that device. Creation waits join_timeout for the
// peers; collectives wait timeout. World sizes above
// CUDA_DEVICE_MAX_CONNECTIONS (8 unless set) are refused: with fewer hardware
// queues than spinning kernels, one rank's kernel can queue behind another's
// that waits for it. Linking
// //comm/ipc_ring:ipc_ring_threads registers "ipc_ring_threads".
#ifndef RINGLAB_COMM_IPC_RING_IPC_RING_THREADS_H_
#define RINGLAB_COMM_IPC_RING_IPC_RING_THREADS_H_

#include "comm/ipc_ring/tuning.h"

#endif  // RINGLAB_COMM_IPC_RING_IPC_RING_THREADS_H_
