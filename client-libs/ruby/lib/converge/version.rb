# frozen_string_literal: true

module Converge
  # The library's version.
  VERSION = "0.1.0"
end
