#include "agent/topology/recorded_sources.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace monta::topology {
namespace {

// A source that answers the same snapshot (or error) on every Read.
template <typename Source, typename Snapshot>
class FixedSource : public Source {
 public:
  explicit FixedSource(absl::StatusOr<Snapshot> answer)
      : answer_(std::move(answer)) {}
  absl::StatusOr<Snapshot> Read() override { return answer_; }

 private:
  absl::StatusOr<Snapshot> answer_;
};

// Loads `path`, turning yaml-cpp's exceptions (syntax and conversion errors)
// into an InvalidArgument that names the file.
template <typename Fn>
auto WithYaml(const std::string& path, Fn fn) -> decltype(fn(YAML::Node())) {
  try {
    return fn(YAML::LoadFile(path));
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": line ", e.mark.line + 1, ": ", e.msg));
  }
}

// The frame every recording shares: `error:` makes a source that answers that
// error, `origin:` (default "recorded <path>") names the snapshot's origin, and
// read_body(root, snapshot) reads the rest.
template <typename Source, typename Snapshot, typename ReadBody>
absl::StatusOr<std::unique_ptr<Source>> LoadRecording(const std::string& path,
                                                      ReadBody read_body) {
  using Fixed = FixedSource<Source, Snapshot>;
  return WithYaml(
      path,
      [&](const YAML::Node& root) -> absl::StatusOr<std::unique_ptr<Source>> {
        if (root["error"]) {
          return std::unique_ptr<Source>(std::make_unique<Fixed>(
              absl::UnavailableError(root["error"].as<std::string>())));
        }
        Snapshot snapshot;
        snapshot.origin = root["origin"] ? root["origin"].as<std::string>()
                                         : absl::StrCat("recorded ", path);
        absl::Status status = read_body(root, snapshot);
        if (!status.ok()) return status;
        return std::unique_ptr<Source>(
            std::make_unique<Fixed>(std::move(snapshot)));
      });
}

}  // namespace

std::unique_ptr<GpuSource> MakeFixedGpuSource(
    absl::StatusOr<CudaSnapshot> answer) {
  return std::make_unique<FixedSource<GpuSource, CudaSnapshot>>(
      std::move(answer));
}

std::unique_ptr<NvmlSource> MakeFixedNvmlSource(
    absl::StatusOr<NvmlSnapshot> answer) {
  return std::make_unique<FixedSource<NvmlSource, NvmlSnapshot>>(
      std::move(answer));
}

namespace {

// gpus: CUDA ordinals 0, 1, 2, ... in order; peer_access: "all" or "i->j".
absl::Status ReadCudaRecording(const YAML::Node& root, const std::string& path,
                               CudaSnapshot& snapshot) {
  for (const YAML::Node& node : root["gpus"]) {
    CudaGpuRecord gpu;
    gpu.index = node["index"].as<int>();
    gpu.name = node["name"].as<std::string>("");
    gpu.memory_bytes = node["memory_bytes"].as<uint64_t>(0);
    gpu.pci_bus_id = NormalizePciBusId(node["pci_bus_id"].as<std::string>(""));
    gpu.sm_count = node["sm_count"].as<int>(0);
    if (gpu.index != static_cast<int>(snapshot.gpus.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": gpus[", snapshot.gpus.size(),
                       "].index: CUDA ordinals must be 0, 1, 2, ... in order"));
    }
    snapshot.gpus.push_back(std::move(gpu));
  }
  const size_t n = snapshot.gpus.size();
  const YAML::Node peer = root["peer_access"];
  const bool all = peer && peer.IsScalar() && peer.Scalar() == "all";
  snapshot.peer_access.assign(n, std::vector<bool>(n, all));
  for (size_t i = 0; i < n; ++i) snapshot.peer_access[i][i] = false;
  if (peer && peer.IsSequence()) {
    for (const YAML::Node& entry : peer) {
      std::vector<std::string> ends =
          absl::StrSplit(entry.as<std::string>(), "->");
      size_t from = 0;
      size_t to = 0;
      if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &from) ||
          !absl::SimpleAtoi(ends[1], &to) || from >= n || to >= n) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": peer_access: expected \"i->j\" with GPUs below ", n));
      }
      snapshot.peer_access[from][to] = true;
    }
  }
  return absl::OkStatus();
}

// gpus, common_ancestor (pairs not listed get common_ancestor_default),
// nvlinks.
absl::Status ReadNvmlRecording(const YAML::Node& root, NvmlSnapshot& snapshot) {
  for (const YAML::Node& node : root["gpus"]) {
    NvmlGpuRecord gpu;
    gpu.index = node["index"].as<int>();
    gpu.uuid = node["uuid"].as<std::string>("");
    gpu.name = node["name"].as<std::string>("");
    gpu.memory_bytes = node["memory_bytes"].as<uint64_t>(0);
    gpu.pci_bus_id = NormalizePciBusId(node["pci_bus_id"].as<std::string>(""));
    snapshot.gpus.push_back(std::move(gpu));
  }
  const int default_level = root["common_ancestor_default"].as<int>(
      static_cast<int>(kNvmlTopologySystem));
  std::map<std::pair<int, int>, int> levels;
  for (const YAML::Node& node : root["common_ancestor"]) {
    const int a = node["gpus"][0].as<int>();
    const int b = node["gpus"][1].as<int>();
    levels[{std::min(a, b), std::max(a, b)}] = node["level"].as<int>();
  }
  for (size_t a = 0; a < snapshot.gpus.size(); ++a) {
    for (size_t b = a + 1; b < snapshot.gpus.size(); ++b) {
      NvmlPairRecord pair;
      pair.gpu_a = snapshot.gpus[a].index;
      pair.gpu_b = snapshot.gpus[b].index;
      auto it = levels.find({pair.gpu_a, pair.gpu_b});
      pair.common_ancestor_level =
          it != levels.end() ? it->second : default_level;
      snapshot.pairs.push_back(pair);
    }
  }
  std::vector<NvLinkObservation> links;
  for (const YAML::Node& node : root["nvlinks"]) {
    const int first = node["first_link"].as<int>(0);
    const int count = node["count"].as<int>(1);
    for (int link = first; link < first + count; ++link) {
      NvLinkObservation obs;
      obs.gpu = node["gpu"].as<int>();
      obs.link = link;
      obs.active = node["active"].as<bool>(true);
      obs.remote_pci_bus_id =
          NormalizePciBusId(node["remote_pci_bus_id"].as<std::string>(""));
      links.push_back(std::move(obs));
    }
  }
  AggregateNvLinks(snapshot.gpus, links, snapshot.pairs);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuSource>> LoadRecordedGpuSource(
    const std::string& path) {
  return LoadRecording<GpuSource, CudaSnapshot>(
      path, [&](const YAML::Node& root, CudaSnapshot& snapshot) {
        return ReadCudaRecording(root, path, snapshot);
      });
}

absl::StatusOr<std::unique_ptr<NvmlSource>> LoadRecordedNvmlSource(
    const std::string& path) {
  return LoadRecording<NvmlSource, NvmlSnapshot>(path, ReadNvmlRecording);
}

}  // namespace monta::topology
