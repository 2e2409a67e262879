// Every environment variable through which a job's launcher tells a process
// its place in the job, named once: torchrun's (which ringlab's own launcher
// sets too), Open MPI's mpirun's, Slurm's srun's, and ringlab's own. Read by
// the rendezvous (JobEnvironment::Read), set by the launcher (LaunchRanks),
// and consulted by backends that must know how they were started (mpi);
// and the libraries' variables ringlab sets for them.
#ifndef RINGLAB_COMM_JOB_LAUNCH_VARIABLES_H_
#define RINGLAB_COMM_JOB_LAUNCH_VARIABLES_H_

namespace ringlab::comm::launch {

// torchrun's, and ringlab's launcher's.
inline constexpr char kRank[] = "RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";

// Open MPI's mpirun (and PMI/PMIx launchers, whose ranks MPI_Init finds).
inline constexpr char kOmpiRank[] = "OMPI_COMM_WORLD_RANK";
inline constexpr char kOmpiSize[] = "OMPI_COMM_WORLD_SIZE";
inline constexpr char kOmpiLocalRank[] = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr char kPmiSize[] = "PMI_SIZE";
inline constexpr char kPmixRank[] = "PMIX_RANK";

// Slurm's srun: a task's rank, the job's size, its rank on its node, the
// step it belongs to (set in srun's tasks, not in a batch script itself);
// and, where MASTER_ADDR and MASTER_PORT are unset, the node list (rank 0
// runs on its first node) and the job id (the port is 15000 + its last four
// digits, Lightning's convention).
inline constexpr char kSlurmProcId[] = "SLURM_PROCID";
inline constexpr char kSlurmStepId[] = "SLURM_STEP_ID";
inline constexpr char kSlurmNtasks[] = "SLURM_NTASKS";
inline constexpr char kSlurmLocalId[] = "SLURM_LOCALID";
inline constexpr char kSlurmNodeList[] = "SLURM_JOB_NODELIST";
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";

// ringlab's own: the job's secret (comm/store/job_secret.h), that the
// launcher hosts the store (so rank 0 does not), where rank 0's store
// listens, and a host identity that replaces the one ranks compute.
inline constexpr char kJobSecret[] = "RINGLAB_JOB_SECRET";
inline constexpr char kStoreHosted[] = "RINGLAB_STORE_HOSTED";
inline constexpr char kStoreBind[] = "RINGLAB_STORE_BIND";
inline constexpr char kHostId[] = "RINGLAB_HOST_ID";
// Set by the launcher for a rank it placed on an emulated host (the host's
// index, comm/cluster): its eth0 is then that host's link, whose counters
// the trainer reports.
inline constexpr char kEmulatedHost[] = "RINGLAB_EMULATED_HOST";

// The libraries' own: the interfaces NCCL's sockets and Open MPI's TCP
// transport use (set to the job's interface unless the user chose one,
// KeepDataSocketsOnJobInterface in job_environment.h).
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";
inline constexpr char kOmpiBtlTcpIfInclude[] = "OMPI_MCA_btl_tcp_if_include";
// Open MPI's transports: a job on one host needs no TCP ("self,vader").
inline constexpr char kOmpiBtl[] = "OMPI_MCA_btl";
// Open MPI's choice of collective algorithms: a user who sets any of these
// keeps it, and the emulated hosts' launcher adds no rules of its own
// (mpirun_on_hosts.h).
inline constexpr char kOmpiCollTunedUseDynamicRules[] =
    "OMPI_MCA_coll_tuned_use_dynamic_rules";
inline constexpr char kOmpiCollTunedDynamicRulesFilename[] =
    "OMPI_MCA_coll_tuned_dynamic_rules_filename";
inline constexpr char kOmpiCollTunedAllreduceAlgorithm[] =
    "OMPI_MCA_coll_tuned_allreduce_algorithm";

}  // namespace ringlab::comm::launch

#endif  // RINGLAB_COMM_JOB_LAUNCH_VARIABLES_H_
