#include "common/http/http_parse.h"

#include "gtest/gtest.h"

namespace monta::http {
namespace {

int Parse(const std::string& head, HttpRequest* request, RequestHead* out) {
  return ParseRequestHead(head, request, out);
}

TEST(HttpParseTest, RequestLineHeadersAndBodyLength) {
  HttpRequest request;
  RequestHead head;
  ASSERT_EQ(Parse("POST /mutate?timeout=10s HTTP/1.1\r\n"
                  "Host: planner\r\nContent-Length:  12 \r\n"
                  "Content-Type: application/json\r\n",
                  &request, &head),
            0);
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "/mutate?timeout=10s");
  EXPECT_EQ(request.path, "/mutate");
  EXPECT_EQ(request.minor_version, 1);
  EXPECT_EQ(head.content_length, 12u);
  EXPECT_TRUE(head.keep_alive);
  EXPECT_FALSE(head.expect_continue);
  EXPECT_EQ(request.Header("content-type"), "application/json");
  EXPECT_EQ(request.Header("host"), "planner");
  EXPECT_EQ(request.Header("missing"), "");
}

TEST(HttpParseTest, ConnectionRulesOfHttp10And11) {
  HttpRequest request;
  RequestHead head;
  ASSERT_EQ(Parse("GET /metrics HTTP/1.0\r\n", &request, &head), 0);
  EXPECT_FALSE(head.keep_alive);
  ASSERT_EQ(Parse("GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n",
                  &request, &head),
            0);
  EXPECT_TRUE(head.keep_alive);
  ASSERT_EQ(
      Parse("GET / HTTP/1.1\r\nConnection: TE, close\r\n", &request, &head), 0);
  EXPECT_FALSE(head.keep_alive);
  ASSERT_EQ(Parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\n"
                  "Content-Length: 5\r\n",
                  &request, &head),
            0);
  EXPECT_TRUE(head.expect_continue);
}

TEST(HttpParseTest, MalformedAndUnsupportedHeadsGetTheirStatus) {
  HttpRequest request;
  RequestHead head;
  EXPECT_EQ(Parse("GET /\r\n", &request, &head), 400);
  EXPECT_EQ(Parse("GET nope HTTP/1.1\r\n", &request, &head), 400);
  EXPECT_EQ(Parse("G(T / HTTP/1.1\r\n", &request, &head), 400);
  EXPECT_EQ(Parse("GET / HTTP/2.0\r\n", &request, &head), 505);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nno colon\r\n", &request, &head), 400);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nBad Name: x\r\n", &request, &head), 400);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nA: b\r\n folded\r\n", &request, &head),
            400);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nContent-Length: -1\r\n", &request, &head),
            400);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nContent-Length: 1\r\n"
                  "Content-Length: 2\r\n",
                  &request, &head),
            400);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", &request,
                  &head),
            411);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nExpect: magic\r\n", &request, &head),
            417);
}

TEST(HttpParseTest, ResponseCarriesLengthAndConnection) {
  HttpResponse response;
  response.status = 404;
  response.body = "gone\n";
  response.headers.emplace_back("Allow", "GET");
  EXPECT_EQ(SerializeResponse(response, /*close=*/true),
            "HTTP/1.1 404 Not Found\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 5\r\nAllow: GET\r\nConnection: close\r\n\r\n"
            "gone\n");
  response.status = 200;
  response.body.clear();
  response.content_type.clear();
  response.headers.clear();
  EXPECT_EQ(SerializeResponse(response, /*close=*/false),
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
            "Connection: keep-alive\r\n\r\n");
}

}  // namespace
}  // namespace monta::http
