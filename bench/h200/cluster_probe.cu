// Probes how an sm_90 GPU numbers shared memory in a thread-block cluster,
// for fa4-emu's model of it (docs/Emulator.md, "Clusters and CTA pairs"):
// each CTA's shared::cta address of its dynamic shared memory, mapa of it to
// every rank of the cluster (shared::cluster and generic), getctarank of
// those, the cluster's special registers, and a DSMEM read of the next rank's
// word after barrier.cluster, for grids of 6 CTAs in clusters of 3 and 8 in
// clusters of 4. Prints JSON.
//
//   nvcc -O2 -arch=sm_90a -o dist-probe/cluster_probe bench/h200/cluster_probe.cu
//   ./dist-probe/cluster_probe > cluster-probe.json      (on the H200)
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__device__ uint32_t rankOf() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }

struct Probe {
  uint32_t rank, nrank, clusterid, nclusterid, clusterCtaid, clusterNctaid, ctaid;
  uint32_t own;          // shared::cta address of the dynamic shared array
  uint32_t mapped[4];    // mapa of it to ranks 0..3
  uint32_t owner[4];     // getctarank of mapped[r]
  uint64_t generic;      // generic address of the array
  uint64_t genericMapped[4];
  uint32_t neighbour;    // value the next rank stored, read through DSMEM
};

extern "C" __global__ void probe(Probe *out) {
  extern __shared__ __align__(1024) uint32_t words[];
  Probe p = {};
  p.rank = rankOf();
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(p.nrank));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(p.clusterid));
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(p.nclusterid));
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;" : "=r"(p.clusterCtaid));
  asm volatile("mov.u32 %0, %%cluster_nctaid.x;" : "=r"(p.clusterNctaid));
  p.ctaid = blockIdx.x;
  p.own = static_cast<uint32_t>(__cvta_generic_to_shared(words));
  p.generic = reinterpret_cast<uint64_t>(words);
  for (uint32_t r = 0; r < 4; ++r) {
    if (r < p.nrank) {
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(p.mapped[r]) : "r"(p.own), "r"(r));
      asm volatile("getctarank.shared::cluster.u32 %0, %1;" : "=r"(p.owner[r]) : "r"(p.mapped[r]));
      asm volatile("mapa.u64 %0, %1, %2;" : "=l"(p.genericMapped[r]) : "l"(p.generic), "r"(r));
    }
  }
  if (threadIdx.x == 0)
    words[0] = 1000 + blockIdx.x;
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  uint32_t next = (p.rank + 1) % p.nrank, remote;
  uint32_t addr;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(p.own), "r"(next));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(remote) : "r"(addr));
  p.neighbour = remote;
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x == 0)
    out[blockIdx.x] = p;
}

int main() {
  const int grids[2] = {6, 8}, clusters[2] = {3, 4};
  printf("{\"device\": ");
  cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
  printf("\"%s\", \"runs\": [", prop.name);
  for (int c = 0; c < 2; ++c) {
    Probe *d; cudaMalloc(&d, sizeof(Probe) * grids[c]);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grids[c]); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = 4096;
    cudaLaunchAttribute attr; attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = clusters[c]; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
    cfg.attrs = &attr; cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, probe, d);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    Probe h[8];
    cudaMemcpy(h, d, sizeof(Probe) * grids[c], cudaMemcpyDeviceToHost);
    printf("%s{\"grid\": %d, \"cluster\": %d, \"error\": \"%s\", \"ctas\": [", c ? ", " : "", grids[c], clusters[c], cudaGetErrorString(e));
    for (int i = 0; i < grids[c]; ++i) {
      Probe &p = h[i];
      printf("%s{\"ctaid\": %u, \"rank\": %u, \"nrank\": %u, \"clusterid\": %u, \"nclusterid\": %u, \"cluster_ctaid\": %u, \"cluster_nctaid\": %u, \"own\": \"0x%x\", \"mapped\": [\"0x%x\", \"0x%x\", \"0x%x\", \"0x%x\"], \"owner\": [%u, %u, %u, %u], \"generic\": \"0x%llx\", \"generic_mapped\": [\"0x%llx\", \"0x%llx\", \"0x%llx\", \"0x%llx\"], \"neighbour\": %u}",
             i ? ", " : "", p.ctaid, p.rank, p.nrank, p.clusterid, p.nclusterid, p.clusterCtaid, p.clusterNctaid, p.own,
             p.mapped[0], p.mapped[1], p.mapped[2], p.mapped[3], p.owner[0], p.owner[1], p.owner[2], p.owner[3],
             (unsigned long long)p.generic, (unsigned long long)p.genericMapped[0], (unsigned long long)p.genericMapped[1],
             (unsigned long long)p.genericMapped[2], (unsigned long long)p.genericMapped[3], p.neighbour);
    }
    printf("]}");
    cudaFree(d);
  }
  printf("]}\n");
  return 0;
}
