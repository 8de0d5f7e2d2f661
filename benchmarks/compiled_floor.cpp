// A measuring device for benchmarks/compiled_floor.py, not part of hookviz: what recording costs when
// the per-Node work (the graph walk, a post-hook on every Node, a 2-norm per gradient it passes on)
// runs in C++ instead of Python. Built against the installed torch (torch.utils.cpp_extension), so
// it needs that torch's headers and a C++ compiler.
#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <unordered_map>

using torch::autograd::AccumulateGrad;
using torch::autograd::FunctionPostHook;
using torch::autograd::Node;
using torch::autograd::variable_list;

// What one backward recorded: a 2-norm per gradient, the Node that passed it on, the Node order,
// and the graph (each Node's name, sequence number and (consumer, slot, producer) edges).
struct Recording {
  std::vector<at::Tensor> norms;
  std::vector<int64_t> norm_node, order, sequence_nrs;
  std::vector<std::string> names;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> edges;

  py::tuple collect() {
    at::Tensor stacked = norms.empty() ? at::empty({0}) : at::stack(norms);
    norms.clear();
    return py::make_tuple(stacked, norm_node, order, names, sequence_nrs, edges);
  }
};

struct NormHook : FunctionPostHook {
  std::shared_ptr<Recording> recording;
  int64_t node;
  NormHook(std::shared_ptr<Recording> r, int64_t n) : recording(std::move(r)), node(n) {}
  variable_list operator()(const variable_list& grad_inputs, const variable_list& grad_outputs) override {
    recording->order.push_back(node);
    for (const auto& grad : grad_inputs) {
      if (grad.defined()) {
        recording->norms.push_back(at::linalg_vector_norm(grad.detach(), 2));
        recording->norm_node.push_back(node);
      }
    }
    return grad_inputs;
  }
};

// Walk the graph of `loss` breadth-first and hang a NormHook on every Node but the leaves'.
std::shared_ptr<Recording> hook_every_node(const at::Tensor& loss) {
  auto recording = std::make_shared<Recording>();
  std::unordered_map<Node*, int64_t> index;
  std::vector<Node*> queue{loss.grad_fn().get()};
  index[queue[0]] = 0;
  for (size_t k = 0; k < queue.size(); ++k) {
    Node* node = queue[k];
    recording->names.push_back(node->name());
    recording->sequence_nrs.push_back(node->sequence_nr());
    if (dynamic_cast<AccumulateGrad*>(node) == nullptr) {
      node->add_post_hook(std::make_unique<NormHook>(recording, static_cast<int64_t>(k)));
    }
    int64_t slot = 0;
    for (const auto& edge : node->next_edges()) {
      Node* child = edge.function.get();
      if (child != nullptr) {
        auto found = index.find(child);
        int64_t at = found == index.end() ? static_cast<int64_t>(queue.size()) : found->second;
        if (found == index.end()) {
          index[child] = at;
          queue.push_back(child);
        }
        recording->edges.emplace_back(static_cast<int64_t>(k), slot, at);
      }
      ++slot;
    }
  }
  return recording;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Recording, std::shared_ptr<Recording>>(m, "Recording").def("collect", &Recording::collect);
  m.def("hook_every_node", &hook_every_node);
}
