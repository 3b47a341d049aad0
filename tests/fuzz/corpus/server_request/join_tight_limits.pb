

hospital-a0.1.0cpufp32"

w
ê

b


s*age*bmi2@add53802b60d51c2b1f16ab3aed64eb88a709fae9d85e9873256137e667631fc