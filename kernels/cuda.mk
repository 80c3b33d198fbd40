# kernels/cuda.mk: builds build/kernels/agentreplay-kernels, the CUDA
# driver of the Kimi K3 decode layer, with nvcc (run by `make kernels`).
# The C references (k3ref.c, k3layer.c) are compiled with the C compiler,
# the CUDA sources with nvcc for sm_90 (Hopper) and sm_100 (Blackwell);
# links cudart and NCCL.
NVCC     ?= nvcc
CC       ?= cc
OUT      := build/kernels
OBJ      := $(OUT)/cuda
CUDA_HOME ?= $(abspath $(dir $(shell readlink -f $(shell command -v $(NVCC))))/..)
# NCCL: beside the toolkit, where the system keeps it, or given as
# NCCL_LIB= / NCCL_INC= (e.g. the nvidia-nccl Python wheel's lib and
# include folders). Without it the driver builds with -DK3_NO_NCCL and
# says so when several GPUs are present.
NCCL_LIB ?= $(firstword $(foreach d,$(CUDA_HOME)/lib $(CUDA_HOME)/lib64 /usr/lib/x86_64-linux-gnu /usr/local/lib,$(if $(wildcard $(d)/libnccl.so*),$(d))))
NCCL_INC ?= $(firstword $(foreach d,$(CUDA_HOME)/include /usr/local/include /usr/include,$(if $(wildcard $(d)/nccl.h),$(d))))
ifneq ($(and $(NCCL_LIB),$(NCCL_INC)),)
NCCL_FLAGS := -I$(NCCL_INC)
NCCL_LINK  := -L$(NCCL_LIB) -Xlinker -rpath=$(NCCL_LIB) $(if $(wildcard $(NCCL_LIB)/libnccl.so),-lnccl,-l:libnccl.so.2)
else
NCCL_FLAGS := -DK3_NO_NCCL
NCCL_LINK  :=
endif
ARCHS    ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100
NVFLAGS  := -std=c++17 -O3 -I. $(NCCL_FLAGS) $(ARCHS) \
            -Xcompiler -Wall,-Wextra,-Wno-unused-parameter --Werror all-warnings
CFLAGS_K := -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -I.

C_SRC  := kernels/k3ref.c kernels/k3layer.c kernels/k3calib.c
CU_SRC := kernels/k3_kernels.cu kernels/k3_main.cu
OBJS   := $(C_SRC:kernels/%.c=$(OBJ)/%.o) $(CU_SRC:kernels/%.cu=$(OBJ)/%.o)

$(OUT)/agentreplay-kernels: $(OBJS)
	$(NVCC) $(ARCHS) $(OBJS) -o $@ $(NCCL_LINK) -lcudart

$(OBJ)/%.o: kernels/%.c kernels/k3layer.h kernels/k3ref.h kernels/k3num.h kernels/k3calib.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_K) -c $< -o $@

$(OBJ)/%.o: kernels/%.cu kernels/k3_gpu.cuh kernels/k3layer.h kernels/k3ref.h kernels/k3num.h kernels/k3calib.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
