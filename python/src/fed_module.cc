// weightport._core's federated rounds: FedServer and FedClient over NumPy float32 arrays. Every
// call that waits releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <memory>
#include <vector>

#include "bind_util.h"
#include "weightport/engine/fed/fed_client.h"
#include "weightport/engine/fed/fed_codec.h"
#include "weightport/engine/fed/fed_report.h"
#include "weightport/engine/fed/fed_server.h"

namespace weightport::python {
namespace {

using namespace nb::literals;
using FloatIn = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using FloatOut = nb::ndarray<nb::numpy, float, nb::ndim<1>>;

// A NumPy array that owns a copy of `values`.
FloatOut Copy(std::span<const float> values) {
  auto* data = new std::vector<float>(values.begin(), values.end());
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  size_t shape[1] = {data->size()};
  return FloatOut(data->data(), 1, shape, owner);
}

class PyFedServer {
 public:
  PyFedServer(nb::bytes secret, const std::string& host, int port, FloatIn initial, size_t clients,
              uint64_t rounds, uint32_t chunk_elements, double deadline_s, const std::string& late,
              double staleness, bool compress) {
    if (late != "drop" && late != "fold")
      throw StatusError{StatusCode::kInvalidArgument, "late must be 'drop' or 'fold', got '" + late + "'"};
    if (chunk_elements == 0)
      throw StatusError{StatusCode::kInvalidArgument, "chunk_elements must be positive"};
    FedServerOptions o;
    o.clients = clients;
    o.rounds = rounds;
    o.chunk_elements = chunk_elements;
    o.deadline = Millis(deadline_s);
    o.late = late == "fold" ? FedLatePolicy::kFold : FedLatePolicy::kDrop;
    o.staleness = staleness;
    o.compress = compress;
    std::vector<float> model(initial.data(), initial.data() + initial.shape(0));
    auto listener =
        Take(ControlListener::Listen(host, static_cast<uint16_t>(port), "fed-server", MakeSecret(secret)));
    server_ = std::make_unique<FedServer>(std::move(listener), std::move(model), o);
  }
  std::string address() const { return server_->address(); }
  std::string Run() {
    nb::gil_scoped_release release;
    return FedRoundsJson(Take(server_->Run()));
  }
  FloatOut Global() const { return Copy(server_->global()); }
  uint64_t state_bytes() const { return server_->peak_state_bytes(); }

 private:
  std::unique_ptr<FedServer> server_;
};

class PyFedClient {
 public:
  PyFedClient(nb::bytes secret, const std::string& server, const std::string& name,
              const std::string& encoding, bool compress, double timeout_s) {
    FedClientOptions o;
    o.name = name;
    o.encoding = Take(ParseFedEncoding(encoding));
    o.compress = compress;
    o.timeout = Millis(timeout_s);
    Secret s = MakeSecret(secret);
    nb::gil_scoped_release release;
    client_ = Take(FedClient::Connect(server, s, o));
  }
  // The round's model, or None when the server ended the run.
  nb::object NextRound() {
    Result<std::span<const float>> start = Status(Cancelled(""));
    {
      nb::gil_scoped_release release;
      start = client_->NextRound();
    }
    if (!start.ok() && start.status().code() == StatusCode::kNotFound) return nb::none();
    return nb::cast(Copy(Take(std::move(start))));
  }
  std::string SendUpdate(FloatIn update, double samples) {
    std::span<const float> values(update.data(), update.shape(0));
    FedClientRound r;
    {
      nb::gil_scoped_release release;
      r = Take(client_->SendUpdate(values, samples));
    }
    return FedClientRoundJson(r);
  }
  uint64_t round() const { return client_->round(); }

 private:
  std::unique_ptr<FedClient> client_;
};

}  // namespace

void BindFederated(nb::module_& m) {
  nb::class_<PyFedServer>(m, "FedServer")
      .def(nb::init<nb::bytes, const std::string&, int, FloatIn, size_t, uint64_t, uint32_t, double,
                    const std::string&, double, bool>(),
           "secret"_a, "host"_a, "port"_a, "initial"_a, "clients"_a, "rounds"_a, "chunk_elements"_a,
           "deadline_s"_a, "late"_a, "staleness"_a, "compress"_a,
           "Listens; the model is the initial global (float32).")
      .def_prop_ro("address", &PyFedServer::address, "HOST:PORT the server listens on.")
      .def("run", &PyFedServer::Run, "Waits for the clients, runs every round; the reports as JSON text.")
      .def("global_model", &PyFedServer::Global, "A copy of the global model (float32).")
      .def("state_bytes", &PyFedServer::state_bytes, "Most bytes the aggregation held at once.");
  nb::class_<PyFedClient>(m, "FedClient")
      .def(nb::init<nb::bytes, const std::string&, const std::string&, const std::string&, bool, double>(),
           "secret"_a, "server"_a, "name"_a, "encoding"_a, "compress"_a, "timeout_s"_a, "Connects and joins.")
      .def("next_round", &PyFedClient::NextRound, "The next round's model (float32), or None at the end.")
      .def("send_update", &PyFedClient::SendUpdate, "update"_a, "samples"_a,
           "Sends the update (float32, the model's length) with its sample count; this round's figures as "
           "JSON.")
      .def_prop_ro("round", &PyFedClient::round, "The round in progress.");
}

}  // namespace weightport::python
