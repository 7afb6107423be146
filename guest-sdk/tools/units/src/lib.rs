//! Example tool: converts lengths between units. Pure computation, so its
//! policy grants nothing.

warden_guest::wit_bindgen::generate!({
    runtime_path: "warden_guest::wit_bindgen::rt",
});

struct Units;

impl Unit {
    fn meters(self) -> f64 {
        match self {
            Unit::Meter => 1.0,
            Unit::Kilometer => 1000.0,
            Unit::Foot => 0.3048,
            Unit::Inch => 0.0254,
            Unit::Mile => 1609.344,
        }
    }
}

impl Guest for Units {
    fn convert(quantity: Quantity, to: Unit) -> Result<f64, String> {
        if !quantity.value.is_finite() {
            return Err("value must be a finite number".to_string());
        }
        Ok(quantity.value * quantity.unit.meters() / to.meters())
    }

    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
}

export!(Units);
