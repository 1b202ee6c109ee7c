// Swagger UI on the document this gateway serves. No validator badge (it
// would call validator.swagger.io) and nothing else off this origin: the
// page's Content-Security-Policy allows only 'self'.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    persistAuthorization: false,
  });
});
