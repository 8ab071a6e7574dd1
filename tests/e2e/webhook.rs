//! The webhook and the CRDs' schema through a real apiserver: admission, the Application's
//! reviews, the schema and api/ agreeing, reviews only from the apiserver.
mod admission;
mod agreement;
mod apiserver_auth;
mod application;
mod schema;
